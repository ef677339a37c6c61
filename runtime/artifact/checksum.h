//===- checksum.h - Content digests of an artifact's sections ---*- C++ -*-===//
//
// XXH3-64 (Debian's libxxhash, compiled in from its header: no library to
// link) of an artifact's bytes: the whole file in its trailer, each kernel
// image in its table. Not a signature: it catches corruption (a flipped
// byte, a truncated copy), which the FlatBuffers verifier cannot see inside
// a kernel image's bytes, before anything is loaded or executed.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_ARTIFACT_CHECKSUM_H
#define KIMI_RUNTIME_ARTIFACT_CHECKSUM_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace kimi::rt {

/// XXH3-64 of `size` bytes at `data`.
uint64_t contentDigest(const void *data, size_t size);

/// "xxh3:" and 16 hex digits, as kimi-inspect prints digests.
std::string digestText(uint64_t digest);

/// The file's last bytes: this magic, then the little-endian XXH3-64 of
/// every byte before the trailer.
inline constexpr char kArtifactTrailerMagic[9] = "KIMIXXH3";
inline constexpr size_t kArtifactTrailerBytes = 16;

} // namespace kimi::rt

#endif // KIMI_RUNTIME_ARTIFACT_CHECKSUM_H
