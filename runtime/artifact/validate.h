//===- validate.h - Semantic checks of an artifact --------------*- C++ -*-===//
//
// The checks FlatBuffers' verifier cannot make: format version, value ranges,
// references between sections (entries -> kernels, programs -> entries),
// the prefill/decode signature contract of docs/runtime-abi.md, and the memory
// plan. The reader runs them on every artifact it opens and the writer before
// it serialises one. Messages say what is wrong and where.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_ARTIFACT_VALIDATE_H
#define KIMI_RUNTIME_ARTIFACT_VALIDATE_H

#include "runtime/artifact/types.h"
#include "runtime/support/status.h"

namespace kimi::rt {

/// Largest tensor rank accepted in a signature or the weight manifest.
inline constexpr size_t kMaxRank = 8;

/// OK, or the first problem found (code kInvalidArtifact).
Status validateArtifact(const ArtifactSpec &artifact);

/// Bytes of one token's rows of a cache spec (product of its static dims and
/// the element size). The spec must have passed validation.
int64_t cacheRowBytes(const TensorSpec &spec);
/// Bytes of a fully static spec. The spec must have passed validation.
int64_t staticBytes(const TensorSpec &spec);

/// A session's state bytes and cache bytes per token: the sums over the
/// state and cache outputs of `prefill` (zero without one). The artifact
/// must have passed validation.
SessionMemory sessionMemory(const ArtifactSpec &spec);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_ARTIFACT_VALIDATE_H
