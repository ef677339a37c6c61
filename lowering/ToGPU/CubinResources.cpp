//===- CubinResources.cpp - per-kernel registers and shared memory --------===//

#include "lowering/ToGPU/CubinResources.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"

#include <cstring>

namespace kimi::gpu {

namespace {
constexpr uint16_t kEmCuda = 190;
constexpr uint32_t kShtSymtab = 2;
constexpr uint8_t kEifmtSval = 4;     // attribute with a payload of `size` bytes
constexpr uint8_t kEiattrFrameSize = 0x11;
constexpr uint8_t kEiattrRegcount = 0x2f;

llvm::Error malformed(const llvm::Twine &what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "malformed cubin: " + what);
}

/// Little-endian reads, bounds-checked against the image.
class Reader {
public:
  explicit Reader(llvm::StringRef bytes) : bytes_(bytes) {}
  bool has(uint64_t offset, uint64_t size) const {
    return offset <= bytes_.size() && size <= bytes_.size() - offset;
  }
  template <typename T> T at(uint64_t offset) const {
    T v;
    std::memcpy(&v, bytes_.data() + offset, sizeof(T));
    return v; // the hosts kimi builds on are little-endian, like the cubin
  }
  /// The NUL-terminated string at `offset` (empty when out of bounds or
  /// unterminated).
  llvm::StringRef cstring(uint64_t offset) const {
    if (offset >= bytes_.size())
      return {};
    llvm::StringRef rest = bytes_.substr(offset);
    size_t end = rest.find('\0');
    return end == llvm::StringRef::npos ? llvm::StringRef() : rest.take_front(end);
  }
  llvm::StringRef slice(uint64_t offset, uint64_t size) const {
    return bytes_.substr(offset, size);
  }

private:
  llvm::StringRef bytes_;
};

struct Section {
  llvm::StringRef name;
  uint32_t type, link;
  uint64_t offset, size;
};
} // namespace

llvm::Expected<std::vector<KernelResources>> readCubinResources(llvm::StringRef cubin) {
  Reader r(cubin);
  if (!r.has(0, 64) || cubin.substr(0, 4) != "\x7f" "ELF")
    return malformed("no ELF header");
  if (cubin[4] != 2 || cubin[5] != 1)
    return malformed("not a 64-bit little-endian ELF");
  if (r.at<uint16_t>(18) != kEmCuda)
    return malformed("machine " + llvm::Twine(r.at<uint16_t>(18)) +
                     ", not EM_CUDA (190)");
  const uint64_t shoff = r.at<uint64_t>(0x28);
  const uint16_t shentsize = r.at<uint16_t>(0x3A), shnum = r.at<uint16_t>(0x3C),
                 shstrndx = r.at<uint16_t>(0x3E);
  if (shentsize < 64 || !r.has(shoff, uint64_t(shentsize) * shnum))
    return malformed("section headers out of the image");
  if (shstrndx >= shnum)
    return malformed("section-name table index " + llvm::Twine(shstrndx) +
                     " out of " + llvm::Twine(shnum));
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t(i) * shentsize;
    Section &s = sections[i];
    s.type = r.at<uint32_t>(h + 4);
    s.offset = r.at<uint64_t>(h + 24);
    s.size = r.at<uint64_t>(h + 32);
    s.link = r.at<uint32_t>(h + 40);
    // .nv.shared.* sections occupy no bytes of the image (SHT_NOBITS).
    if (s.type != 8 && !r.has(s.offset, s.size))
      return malformed("section " + llvm::Twine(i) + " out of the image");
  }
  const Section &names = sections[shstrndx];
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint32_t n = r.at<uint32_t>(shoff + uint64_t(i) * shentsize);
    if (n >= names.size)
      return malformed("section " + llvm::Twine(i) + "'s name out of its table");
    sections[i].name = r.cstring(names.offset + n);
  }

  std::vector<KernelResources> kernels;
  llvm::StringMap<size_t> byName;
  for (const Section &s : sections)
    if (s.name.starts_with(".text.")) {
      byName[s.name.drop_front(6)] = kernels.size();
      kernels.push_back({s.name.drop_front(6).str(), -1, 0, 0});
    }
  for (const Section &s : sections)
    if (s.name.starts_with(".nv.shared.")) {
      auto it = byName.find(s.name.drop_front(11));
      if (it != byName.end())
        kernels[it->second].sharedBytes = int64_t(s.size);
    }

  // Symbol names, for the register counts (records name kernels by symbol).
  std::vector<llvm::StringRef> symbols;
  for (const Section &s : sections) {
    if (s.type != kShtSymtab)
      continue;
    if (s.link >= shnum)
      return malformed("symbol table's string table index out of range");
    const Section &strings = sections[s.link];
    for (uint64_t o = 0; o + 24 <= s.size; o += 24) {
      const uint32_t n = r.at<uint32_t>(s.offset + o);
      symbols.push_back(n < strings.size ? r.cstring(strings.offset + n)
                                         : llvm::StringRef());
    }
    break;
  }
  for (const Section &s : sections) {
    if (s.name != ".nv.info" || s.type == 8) // NOBITS: no bytes to read
      continue;
    for (uint64_t o = 0; o + 4 <= s.size;) {
      const uint8_t format = uint8_t(cubin[s.offset + o]);
      const uint8_t attribute = uint8_t(cubin[s.offset + o + 1]);
      const uint16_t size = r.at<uint16_t>(s.offset + o + 2);
      const uint64_t payload = format == kEifmtSval ? size : 0;
      if (o + 4 + payload > s.size)
        return malformed(".nv.info record at " + llvm::Twine(o) +
                         " runs past its section");
      // (symbol, value) records of a kernel.
      if (format == kEifmtSval && size >= 8 &&
          (attribute == kEiattrRegcount || attribute == kEiattrFrameSize)) {
        const uint32_t symbol = r.at<uint32_t>(s.offset + o + 4);
        const uint32_t value = r.at<uint32_t>(s.offset + o + 8);
        if (symbol < symbols.size()) {
          auto it = byName.find(symbols[symbol]);
          if (it != byName.end())
            (attribute == kEiattrRegcount ? kernels[it->second].registers
                                          : kernels[it->second].frameBytes) = value;
        }
      }
      o += 4 + payload;
    }
  }
  return kernels;
}

llvm::Error writeKernelReport(llvm::ArrayRef<std::string> cubins,
                              llvm::raw_ostream &os,
                              llvm::ArrayRef<std::string> modules) {
  std::vector<KernelResources> all;
  for (size_t i = 0; i < cubins.size(); ++i) {
    auto kernels = readCubinResources(cubins[i]);
    if (!kernels)
      return kernels.takeError();
    for (KernelResources &k : *kernels) {
      if (i < modules.size())
        k.name = modules[i] + "::" + k.name;
      all.push_back(std::move(k));
    }
  }
  llvm::sort(all, [](const KernelResources &a, const KernelResources &b) {
    return a.name < b.name;
  });
  llvm::json::OStream j(os, 2);
  j.object([&] {
    j.attributeArray("kernels", [&] {
      for (const KernelResources &k : all)
        j.object([&] {
          j.attribute("name", k.name);
          j.attribute("registers", k.registers);
          j.attribute("frame_bytes", k.frameBytes);
          j.attribute("shared_bytes", k.sharedBytes);
        });
    });
  });
  os << "\n";
  return llvm::Error::success();
}

} // namespace kimi::gpu
