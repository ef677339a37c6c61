//===- CubinResourcesTest.cpp - readCubinResources on built ELF images ----===//
//
// The reader against cubin-shaped ELF images built here (so the expected
// registers and shared bytes are known without ptxas), then truncated and
// mutated images: every one must give kernels or an error, never a read out
// of bounds. test/Lowering/ToGPU/model-kernel-report.test reads ptxas's own.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/CubinResources.h"

#include <gtest/gtest.h>

#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

using kimi::gpu::readCubinResources;

namespace {

/// A minimal cubin: sections null, .shstrtab, .strtab, .symtab (null and
/// one FUNC symbol per kernel), .text.<k>, .nv.shared.<k> (NOBITS, `shared`
/// bytes; only when nonzero) and .nv.info with an EIATTR_REGCOUNT record
/// per kernel.
struct Kernel {
  std::string name;
  uint32_t registers;
  uint64_t shared;
  uint32_t frame = 0;
};

template <typename T> void put(std::string &s, size_t at, T v) {
  if (s.size() < at + sizeof(T))
    s.resize(at + sizeof(T), '\0');
  std::memcpy(&s[at], &v, sizeof(T));
}

std::string buildCubin(const std::vector<Kernel> &kernels) {
  struct Sec {
    std::string name;
    uint32_t type;
    std::string bytes;
    uint64_t size; // NOBITS: the size without bytes
    uint32_t link = 0;
  };
  std::vector<Sec> secs;
  secs.push_back({"", 0, "", 0});
  std::string strtab(1, '\0'), symtab(24, '\0');
  for (const Kernel &k : kernels) {
    std::string sym(24, '\0');
    put<uint32_t>(sym, 0, uint32_t(strtab.size()));
    sym[4] = 0x12; // global FUNC
    strtab += k.name + '\0';
    symtab += sym;
  }
  secs.push_back({".strtab", 3, strtab, strtab.size()});
  secs.push_back({".symtab", 2, symtab, symtab.size(), 1}); // names in .strtab
  std::string info;
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::string rec(12, '\0');
    rec[0] = 4;    // EIFMT_SVAL
    rec[1] = 0x2f; // EIATTR_REGCOUNT
    put<uint16_t>(rec, 2, 8);
    put<uint32_t>(rec, 4, uint32_t(i + 1)); // symbol index
    put<uint32_t>(rec, 8, kernels[i].registers);
    std::string other(4, '\0'); // a value-less record before it
    other[0] = 1;
    other[1] = 0x04;
    std::string frame = rec; // EIATTR_FRAME_SIZE, same layout
    frame[1] = 0x11;
    put<uint32_t>(frame, 8, kernels[i].frame);
    info += other + rec + frame;
  }
  secs.push_back({".nv.info", 0x70000000, info, info.size()});
  for (const Kernel &k : kernels) {
    secs.push_back({".text." + k.name, 1, std::string(16, '\x42'), 16});
    if (k.shared)
      secs.push_back({".nv.shared." + k.name, 8, "", k.shared});
  }
  std::string shstrtab(1, '\0');
  std::vector<uint32_t> nameAt;
  for (Sec &s : secs) {
    nameAt.push_back(s.name.empty() ? 0 : uint32_t(shstrtab.size()));
    if (!s.name.empty())
      shstrtab += s.name + '\0';
  }
  nameAt.push_back(uint32_t(shstrtab.size()));
  shstrtab += std::string(".shstrtab") + '\0';
  secs.push_back({".shstrtab", 3, shstrtab, shstrtab.size()});

  std::string elf(64, '\0');
  std::memcpy(&elf[0], "\x7f" "ELF", 4);
  elf[4] = 2; // 64-bit
  elf[5] = 1; // little-endian
  put<uint16_t>(elf, 18, 190);
  std::vector<uint64_t> offsets;
  for (const Sec &s : secs) {
    offsets.push_back(elf.size());
    elf += s.bytes;
  }
  const uint64_t shoff = elf.size();
  put<uint64_t>(elf, 0x28, shoff);
  put<uint16_t>(elf, 0x3A, 64);
  put<uint16_t>(elf, 0x3C, uint16_t(secs.size()));
  put<uint16_t>(elf, 0x3E, uint16_t(secs.size() - 1));
  for (size_t i = 0; i < secs.size(); ++i) {
    std::string h(64, '\0');
    put<uint32_t>(h, 0, nameAt[i]);
    put<uint32_t>(h, 4, secs[i].type);
    put<uint64_t>(h, 24, offsets[i]);
    put<uint64_t>(h, 32, secs[i].size);
    put<uint32_t>(h, 40, secs[i].link);
    elf += h;
  }
  return elf;
}

TEST(CubinResources, ReadsRegistersAndSharedMemoryByKernel) {
  std::string cubin = buildCubin({{"kimi_mla_split", 206, 47616},
                                  {"kimi_gemv", 27, 0},
                                  {"kimi_mla_prefill", 255, 44032, 56}});
  auto kernels = readCubinResources(cubin);
  ASSERT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
  ASSERT_EQ(kernels->size(), 3u);
  EXPECT_EQ((*kernels)[0].name, "kimi_mla_split");
  EXPECT_EQ((*kernels)[0].registers, 206);
  EXPECT_EQ((*kernels)[0].sharedBytes, 47616);
  EXPECT_EQ((*kernels)[1].name, "kimi_gemv");
  EXPECT_EQ((*kernels)[1].registers, 27);
  EXPECT_EQ((*kernels)[1].sharedBytes, 0);
  EXPECT_EQ((*kernels)[0].frameBytes, 0);
  EXPECT_EQ((*kernels)[2].name, "kimi_mla_prefill");
  EXPECT_EQ((*kernels)[2].registers, 255);
  EXPECT_EQ((*kernels)[2].frameBytes, 56);
  EXPECT_EQ((*kernels)[2].sharedBytes, 44032);
}

TEST(CubinResources, ReportIsSortedAndNamesTheModules) {
  std::vector<std::string> cubins = {buildCubin({{"zeta", 40, 0}, {"alpha", 32, 256}}),
                                     buildCubin({{"alpha", 64, 0, 16}})};
  std::string text;
  llvm::raw_string_ostream os(text);
  ASSERT_FALSE(bool(kimi::gpu::writeKernelReport(cubins, os, {"m1", "m0"})));
  const size_t a0 = text.find("\"m0::alpha\""), a1 = text.find("\"m1::alpha\""),
               z1 = text.find("\"m1::zeta\"");
  ASSERT_NE(a0, std::string::npos) << text;
  EXPECT_LT(a0, a1);
  EXPECT_LT(a1, z1);
  EXPECT_NE(text.find("\"frame_bytes\": 16"), std::string::npos) << text;
  // A malformed cubin is an error and writes nothing.
  std::string none;
  llvm::raw_string_ostream noneOs(none);
  llvm::Error e = kimi::gpu::writeKernelReport({std::string("junk")}, noneOs);
  EXPECT_TRUE(bool(e));
  llvm::consumeError(std::move(e));
  EXPECT_TRUE(none.empty());
}

TEST(CubinResources, RejectsWhatIsNotACubin) {
  auto message = [](llvm::StringRef bytes) {
    auto r = readCubinResources(bytes);
    return r ? std::string("ok") : llvm::toString(r.takeError());
  };
  EXPECT_EQ(message(""), "malformed cubin: no ELF header");
  EXPECT_EQ(message(std::string(64, 'x')), "malformed cubin: no ELF header");
  std::string cubin = buildCubin({{"k", 8, 0}});
  std::string x86 = cubin;
  put<uint16_t>(x86, 18, 62);
  EXPECT_EQ(message(x86), "malformed cubin: machine 62, not EM_CUDA (190)");
  std::string cut = cubin.substr(0, cubin.size() - 10);
  EXPECT_EQ(message(cut), "malformed cubin: section headers out of the image");
}

// Truncations and random byte changes of a valid image: kernels or an
// error, never a crash or a read past the image (the copy ends where the
// reader is told it does).
TEST(CubinResources, FuzzedImagesGiveKernelsOrErrors) {
  const std::string cubin = buildCubin({{"a", 30, 512}, {"bb", 64, 0}});
  std::mt19937 rng(20261203);
  int errors = 0, read = 0;
  for (size_t n = 0; n <= cubin.size(); ++n) {
    std::vector<char> exact(cubin.begin(), cubin.begin() + n);
    auto r = readCubinResources(llvm::StringRef(exact.data(), exact.size()));
    r ? ++read : (llvm::consumeError(r.takeError()), ++errors);
  }
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = cubin;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f)
      bytes[rng() % bytes.size()] = char(rng());
    std::vector<char> exact(bytes.begin(), bytes.end());
    auto r = readCubinResources(llvm::StringRef(exact.data(), exact.size()));
    r ? ++read : (llvm::consumeError(r.takeError()), ++errors);
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(read, 0);
}

} // namespace
