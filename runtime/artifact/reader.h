//===- reader.h - Opens and verifies a kimi artifact ------------*- C++ -*-===//
//
// Reads a `.kimi` file (or bytes) into an `ArtifactSpec`. Every artifact goes
// through four gates, each with a message that says what and where:
//   1. framing: size prefix vs actual size ("artifact truncated: 1234 of 5678
//      bytes"), file identifier "KIMI", the checksum trailer;
//   2. the FlatBuffers Verifier (bounds of every table, vector and string);
//      on failure the section (and element) that fails is named;
//   3. the checksums: the file's XXH3-64 against its trailer; on a mismatch
//      the kernel image whose own checksum fails is named, else the tables;
//   4. validateArtifact(): version, ranges, cross references, signatures.
// Nothing of an artifact is loaded or executed before all four pass.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_ARTIFACT_READER_H
#define KIMI_RUNTIME_ARTIFACT_READER_H

#include "runtime/artifact/types.h"
#include "runtime/support/status.h"

namespace kimi::rt {

class ArtifactReader {
public:
  /// Reads and verifies the file at `path`.
  static StatusOr<ArtifactSpec> readFile(const std::string &path);
  /// Verifies `size` bytes at `data` (copied; `data` may be unaligned).
  static StatusOr<ArtifactSpec> readBytes(const void *data, size_t size);
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_ARTIFACT_READER_H
