//===- fuzz_artifact.cpp - libFuzzer target: artifact reader + validator --===//
//
// Any bytes given to ArtifactReader::readBytes (the FlatBuffer verifier, the
// checksums, the conversion and validateArtifact) are accepted or refused
// with a Status; never a crash, a hang or an out-of-bounds read. Each input
// is read twice: as it is (mostly stopped by the file's checksum), and with
// its last 16 bytes replaced by a trailer that matches the rest, so that a
// changed byte reaches the verifier and the semantic checks behind it.
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/checksum.h"
#include "runtime/artifact/reader.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace kimi::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  StatusOr<ArtifactSpec> spec = ArtifactReader::readBytes(data, size);
  if (!spec.isOk())
    (void)spec.status().message().size();
  if (size < kArtifactTrailerBytes)
    return 0;
  std::vector<uint8_t> sealed(data, data + size);
  const size_t body = size - kArtifactTrailerBytes;
  std::memcpy(sealed.data() + body, kArtifactTrailerMagic, 8);
  const uint64_t digest = contentDigest(sealed.data(), body);
  for (int i = 0; i < 8; ++i)
    sealed[body + 8 + i] = static_cast<uint8_t>(digest >> (8 * i));
  StatusOr<ArtifactSpec> resealed = ArtifactReader::readBytes(sealed.data(), size);
  if (!resealed.isOk())
    (void)resealed.status().message().size();
  return 0;
}
