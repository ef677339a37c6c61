//===- ArtifactIntegrityTest.cpp - a real artifact, corrupted -------------===//
//
// k3-tiny's CPU artifact (as kimi-compile wrote it for the e2e tests) cut at
// every length and changed by 10^4 seeded byte flips: the reader refuses
// every one with one error (a truncation, the verifier naming a section, or
// a checksum naming the kernel image or the tables), and never accepts a
// changed file: its shared object is never handed to dlopen.
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/checksum.h"
#include "runtime/artifact/reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>

using namespace kimi::rt;

namespace {

std::vector<uint8_t> tinyArtifact() {
  std::ifstream in(std::string(KIMI_E2E_DIR) + "/k3-tiny.kimi", std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

} // namespace

TEST(ArtifactIntegrity, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = tinyArtifact();
  ASSERT_GT(bytes.size(), 1000u);
  ASSERT_TRUE(ArtifactReader::readBytes(bytes.data(), bytes.size()).isOk());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto spec = ArtifactReader::readBytes(bytes.data(), n);
    ASSERT_FALSE(spec.isOk()) << n << " bytes accepted";
    ASSERT_NE(spec.status().message().find("artifact truncated"), std::string::npos)
        << n << " bytes: " << spec.status().message();
  }
}

TEST(ArtifactIntegrity, SeededByteFlipsAreAllRefused) {
  const std::vector<uint8_t> original = tinyArtifact();
  ASSERT_GT(original.size(), 1000u);
  auto clean = ArtifactReader::readBytes(original.data(), original.size());
  ASSERT_TRUE(clean.isOk()) << clean.status().message();
  ASSERT_EQ(clean->fileDigest, contentDigest(original.data(), original.size() - 16));
  std::mt19937_64 rng(20261207);
  int kernel = 0, tables = 0, verifier = 0, framing = 0;
  std::vector<uint8_t> bytes = original; // changed and restored in place
  for (int iter = 0; iter < 10000; ++iter) {
    const size_t at = rng() % bytes.size();
    const uint8_t was = bytes[at];
    bytes[at] = static_cast<uint8_t>(was ^ (1 + rng() % 255)); // never unchanged
    auto spec = ArtifactReader::readBytes(bytes.data(), bytes.size());
    bytes[at] = was;
    ASSERT_FALSE(spec.isOk()) << "byte " << at << " changed, artifact accepted";
    ASSERT_EQ(spec.status().code(), StatusCode::kInvalidArtifact);
    const std::string &m = spec.status().message();
    if (m.find("kernel 0 ('model.so') does not match its checksum") != std::string::npos)
      ++kernel;
    else if (m.find("do not match the file's checksum") != std::string::npos)
      ++tables;
    else if (m.find("FlatBuffers verification failed") != std::string::npos)
      ++verifier;
    else
      ++framing; // size prefix, identifier, trailer magic
  }
  std::printf("[ flips    ] kernel image %d, tables %d, verifier %d, framing %d\n",
              kernel, tables, verifier, framing);
  // The shared object is most of the file, so most flips land in it.
  EXPECT_GT(kernel, 5000);
  EXPECT_GT(tables + verifier, 0);
}
