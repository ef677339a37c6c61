//===- validate.cpp - Semantic checks of an artifact ----------------------===//

#include "runtime/artifact/validate.h"
#include "runtime/support/text.h"

#include <map>
#include <set>

namespace kimi::rt {
namespace {

/// Largest byte size accepted for one state or one cache row (1 TiB): keeps
/// every later size computation far from overflow.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 40;

Status fail(const std::string &where, const std::string &what) {
  return invalidArtifact(where + ": " + what);
}

bool isDynamic(int64_t d) { return d == -1; }

Status validateSpec(const TensorSpec &spec, const ModelInfo &model,
                    const std::string &where) {
  if (spec.name.empty())
    return fail(where, "empty tensor name");
  if (static_cast<uint8_t>(spec.role) > kLastTensorRole)
    return fail(where, "invalid role " +
                           std::to_string(static_cast<unsigned>(spec.role)));
  if (spec.dtype == DType::kInvalid ||
      static_cast<uint8_t>(spec.dtype) > kLastDType || dtypeSize(spec.dtype) == 0)
    return fail(where, "invalid or sub-byte dtype " + dtypeName(spec.dtype));
  if (spec.shape.size() > kMaxRank)
    return fail(where, "rank " + std::to_string(spec.shape.size()) +
                           " exceeds the maximum of " + std::to_string(kMaxRank));
  int dynamic = 0;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    int64_t d = spec.shape[i];
    if (isDynamic(d))
      ++dynamic;
    else if (d <= 0)
      return fail(where, "dimension " + std::to_string(i) + " is " +
                             std::to_string(d) +
                             " (dimensions are positive or -1 for dynamic)");
  }
  std::vector<int64_t> staticDims;
  for (int64_t d : spec.shape)
    if (!isDynamic(d))
      staticDims.push_back(d);
  int64_t numel = 0;
  if (!checkedNumel(staticDims, numel) ||
      numel > kMaxTensorBytes / static_cast<int64_t>(dtypeSize(spec.dtype)))
    return fail(where, "shape " + shapeToString(spec.shape) + " is too large");

  const std::string shape = shapeToString(spec.shape);
  switch (spec.role) {
  case TensorRole::kTokens:
    if (spec.dtype != DType::kI32)
      return fail(where, "tokens must be i32, got " + dtypeName(spec.dtype));
    if (spec.shape.size() != 2 || isDynamic(spec.shape[0]))
      return fail(where, "tokens must have shape [B, T] with a static batch "
                         "B, got " + shape);
    break;
  case TensorRole::kLogits:
    if (spec.dtype != DType::kF32)
      return fail(where, "logits must be f32, got " + dtypeName(spec.dtype));
    if (spec.shape.empty() || spec.shape.back() != model.vocabSize)
      return fail(where, "logits must end in the vocab size " +
                             std::to_string(model.vocabSize) + ", got " + shape);
    if (dynamic > 1)
      return fail(where, "logits may have one dynamic dimension, got " + shape);
    if (spec.shape.size() != 3)
      return fail(where, "logits must have shape [B, T, V], got " + shape);
    break;
  case TensorRole::kState:
    if (dynamic)
      return fail(where, "state must have a static shape, got " + shape);
    break;
  case TensorRole::kCache: {
    if (dynamic != 1 || spec.shape.size() < 2)
      return fail(where, "cache must have exactly one dynamic (token) dimension "
                         "and rank >= 2, got " + shape);
    if (isDynamic(spec.shape[0]) || !isDynamic(spec.shape[1]))
      return fail(where, "cache must have shape [B, L, ...] with a static "
                         "batch B and the dynamic length L, got " + shape);
    break;
  }
  case TensorRole::kCacheLength:
    if (spec.dtype != DType::kI32)
      return fail(where, "cache_length must be i32, got " + dtypeName(spec.dtype));
    if (spec.shape.size() != 1 || dynamic)
      return fail(where, "cache_length must have shape [B] with a static batch "
                         "B, got " + shape);
    break;
  }
  return Status::ok();
}

bool sameCacheLayout(const TensorSpec &a, const TensorSpec &b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

Status validateEntry(const EntrySpec &entry, size_t index,
                     const ArtifactSpec &artifact) {
  const std::string where =
      "entry " + std::to_string(index) + " " + quoted(entry.name);
  if (entry.name.empty())
    return fail(where, "empty entry name");
  if (entry.symbol.empty())
    return fail(where, "empty symbol");
  if (entry.kernel >= artifact.kernels.size())
    return fail(where, "kernel index " + std::to_string(entry.kernel) +
                           " out of range (" +
                           std::to_string(artifact.kernels.size()) + " kernels)");
  for (int io = 0; io < 2; ++io) {
    const auto &specs = io == 0 ? entry.inputs : entry.outputs;
    const char *kind = io == 0 ? "input" : "output";
    std::set<std::string> names;
    int tokens = 0, logits = 0, lengths = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorSpec &spec = specs[i];
      std::string w = where + ": " + kind + " " + std::to_string(i) + " " +
                      quoted(spec.name);
      KIMI_RETURN_IF_ERROR(validateSpec(spec, artifact.model, w));
      if (!names.insert(spec.name).second)
        return fail(w, std::string("duplicate ") + kind + " name");
      if (spec.role == TensorRole::kTokens) {
        if (io == 1)
          return fail(w, "tokens cannot be an output");
        if (i != 0)
          return fail(w, "the tokens input must come first");
        ++tokens;
      }
      if (spec.role == TensorRole::kLogits) {
        if (io == 0)
          return fail(w, "logits cannot be an input");
        ++logits;
      }
      if (spec.role == TensorRole::kCacheLength) {
        if (io == 1)
          return fail(w, "cache_length cannot be an output");
        if (++lengths > 1)
          return fail(w, "a second cache_length input");
      }
    }
    if (io == 0 && tokens != 1)
      return fail(where, "needs exactly one tokens input, has " +
                             std::to_string(tokens));
    if (io == 1 && logits != 1)
      return fail(where, "needs exactly one logits output, has " +
                             std::to_string(logits));
  }
  // Every sequence-carrying tensor leads with the tokens' batch.
  const int64_t batch = entry.inputs[0].shape[0];
  for (int io = 0; io < 2; ++io) {
    const auto &specs = io == 0 ? entry.inputs : entry.outputs;
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorSpec &spec = specs[i];
      if (spec.role == TensorRole::kTokens || spec.shape.empty() ||
          spec.shape[0] == batch)
        continue;
      return fail(where + ": " + (io == 0 ? "input " : "output ") +
                      std::to_string(i) + " " + quoted(spec.name),
                  std::string(roleName(spec.role)) + " " +
                      shapeToString(spec.shape) + " does not lead with the "
                      "batch " + std::to_string(batch) + " of the tokens");
    }
  }
  return Status::ok();
}

/// The prefill/decode pairing of docs/runtime-abi.md: states and caches are
/// matched by name; prefill returns each once, decode takes and returns each.
Status validateSessionContract(const ArtifactSpec &artifact) {
  const EntrySpec *prefill = artifact.findEntry("prefill");
  const EntrySpec *decode = artifact.findEntry("decode");
  if (!prefill)
    return invalidArtifact("artifact has no 'prefill' entry");
  if (!decode)
    return invalidArtifact("artifact has no 'decode' entry");
  const TensorSpec &decodeTokens = decode->inputs[0];
  // A stateful prefill (a fixed-size chunk step) takes exactly decode's
  // state and cache inputs; a stateless one only the tokens.
  if (prefill->inputs.size() != 1) {
    if (prefill->inputs[0].shape.size() != 2 || prefill->inputs[0].shape[1] < 1)
      return invalidArtifact("entry 'prefill': a stateful prefill needs tokens "
                             "of a static shape [B, C], got " +
                             shapeToString(prefill->inputs[0].shape));
    if (prefill->inputs[0].shape[0] != decodeTokens.shape[0])
      return invalidArtifact(
          "entry 'prefill': a stateful prefill steps decode's sequences, but "
          "its batch " + std::to_string(prefill->inputs[0].shape[0]) +
          " is not decode's " + std::to_string(decodeTokens.shape[0]));
    if (prefill->inputs.size() != decode->inputs.size())
      return invalidArtifact("entry 'prefill': takes " +
                             std::to_string(prefill->inputs.size()) +
                             " inputs, but a stateful prefill takes decode's " +
                             std::to_string(decode->inputs.size()));
    for (size_t i = 1; i < prefill->inputs.size(); ++i) {
      const TensorSpec &p = prefill->inputs[i], &d = decode->inputs[i];
      if (p.name != d.name || p.role != d.role || !sameCacheLayout(p, d))
        return invalidArtifact("entry 'prefill': input " + std::to_string(i) +
                               " " + quoted(p.name) +
                               " differs from decode's input " + quoted(d.name));
    }
  }
  if (decodeTokens.shape[1] != 1 && decodeTokens.shape[1] != -1)
    return invalidArtifact("entry 'decode': input 0 " + quoted(decodeTokens.name) +
                           ": tokens of one step must have shape [1, 1], got " +
                           shapeToString(decodeTokens.shape));

  std::map<std::string, const TensorSpec *> carried; // prefill outputs
  for (const TensorSpec &s : prefill->outputs)
    if (s.role == TensorRole::kState || s.role == TensorRole::kCache)
      carried[s.name] = &s;
  std::map<std::string, const TensorSpec *> decodeIn;
  for (size_t i = 1; i < decode->inputs.size(); ++i) {
    const TensorSpec &s = decode->inputs[i];
    if (s.role == TensorRole::kCacheLength)
      continue; // the session's, not carried
    std::string w = "entry 'decode': input " + std::to_string(i) + " " +
                    quoted(s.name);
    auto it = carried.find(s.name);
    if (it == carried.end())
      return fail(w, std::string(roleName(s.role)) +
                         " is not an output of 'prefill'");
    if (it->second->role != s.role)
      return fail(w, std::string("is a ") + roleName(s.role) +
                         " here but a " + roleName(it->second->role) +
                         " output of 'prefill'");
    if (!sameCacheLayout(*it->second, s))
      return fail(w, dtypeName(s.dtype) + " " + shapeToString(s.shape) +
                         " differs from the 'prefill' output " +
                         dtypeName(it->second->dtype) + " " +
                         shapeToString(it->second->shape));
    decodeIn[s.name] = &s;
  }
  for (const auto &[name, spec] : carried)
    if (!decodeIn.count(name))
      return invalidArtifact("entry 'prefill': output " + quoted(name) + " (" +
                             roleName(spec->role) +
                             ") is not an input of 'decode'");
  std::set<std::string> decodeOut;
  for (size_t i = 0; i < decode->outputs.size(); ++i) {
    const TensorSpec &s = decode->outputs[i];
    if (s.role == TensorRole::kLogits)
      continue;
    std::string w = "entry 'decode': output " + std::to_string(i) + " " +
                    quoted(s.name);
    auto it = decodeIn.find(s.name);
    if (it == decodeIn.end() || it->second->role != s.role)
      return fail(w, std::string(roleName(s.role)) +
                         " is not a " + roleName(s.role) + " input of 'decode'");
    if (!sameCacheLayout(*it->second, s))
      return fail(w, dtypeName(s.dtype) + " " + shapeToString(s.shape) +
                         " differs from the input " + dtypeName(it->second->dtype) +
                         " " + shapeToString(it->second->shape));
    decodeOut.insert(s.name);
  }
  for (const auto &[name, spec] : decodeIn)
    if (!decodeOut.count(name))
      return invalidArtifact("entry 'decode': input " + quoted(name) + " (" +
                             roleName(spec->role) + ") is not returned");

  return Status::ok();
}

Status validateWeights(const ArtifactSpec &artifact) {
  std::set<std::string> names, symbols;
  for (size_t i = 0; i < artifact.weights.size(); ++i) {
    const WeightSpec &w = artifact.weights[i];
    std::string where = "weight " + std::to_string(i) + " " + quoted(w.name);
    if (w.name.empty())
      return fail(where, "empty name");
    if (!names.insert(w.name).second)
      return fail(where, "duplicate weight name");
    if (w.symbol.empty())
      return fail(where, "empty symbol");
    if (!symbols.insert(w.symbol).second)
      return fail(where, "symbol " + quoted(w.symbol) +
                             " is used by another weight");
    for (size_t a = 0; a < w.aliases.size(); ++a)
      if (w.aliases[a].empty())
        return fail(where, "alias " + std::to_string(a) + " is empty");
    if (w.shape.empty())
      return fail(where, "empty shape");
    if (w.paddedForms && w.shape.size() != 1)
      return fail(where, "padded forms need a 1-D weight, got "
                         "shape " + shapeToString(w.shape));
    if (w.shape.size() > kMaxRank)
      return fail(where, "rank " + std::to_string(w.shape.size()) +
                             " exceeds the maximum of " + std::to_string(kMaxRank));
    for (size_t d = 0; d < w.shape.size(); ++d)
      if (w.shape[d] <= 0)
        return fail(where, "dimension " + std::to_string(d) + " is " +
                               std::to_string(w.shape[d]) + " in shape " +
                               shapeToString(w.shape));
    int64_t numel = 0;
    if (!checkedNumel(w.shape, numel) ||
        numel > kMaxTensorBytes / 4)
      return fail(where, "shape " + shapeToString(w.shape) + " is too large");
    if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 &&
        w.dtype != DType::kF16 && w.dtype != DType::kF4E2M1 &&
        w.dtype != DType::kF8E8M0)
      return fail(where, "stored dtype " + dtypeName(w.dtype) +
                             " is not f32, bf16, f16, f4e2m1 or f8e8m0");
    // MXFP4 values pack two a byte along the last dimension.
    if (w.dtype == DType::kF4E2M1 && w.shape.back() % 2)
      return fail(where, "f4e2m1 needs an even last dimension, got " +
                             shapeToString(w.shape));
    if (w.dtype == DType::kF4E2M1 && w.shardParts > 1 &&
        w.shardDim == static_cast<int32_t>(w.shape.size()) - 1)
      return fail(where, "f4e2m1 cannot be split along its packed last "
                         "dimension");
    if (w.name.find("{e}") != std::string::npos && w.shape.size() < 2)
      return fail(where, "a stack of experts ({e}) needs rank >= 2, got " +
                             shapeToString(w.shape));
    if (w.shardParts < 1 ||
        (w.shardParts > 1) != (w.shardDim >= 0) ||
        w.shardDim >= static_cast<int32_t>(w.shape.size()) ||
        (w.shardDim >= 0 && w.shape[w.shardDim] % w.shardParts != 0))
      return fail(where, "shard_dim " + std::to_string(w.shardDim) +
                             " with " + std::to_string(w.shardParts) +
                             " parts does not cut shape " +
                             shapeToString(w.shape) + " into equal blocks");
  }
  return Status::ok();
}

} // namespace

int64_t cacheRowBytes(const TensorSpec &spec) {
  int64_t n = static_cast<int64_t>(dtypeSize(spec.dtype));
  for (int64_t d : spec.shape)
    if (d > 0)
      n *= d;
  return n;
}

int64_t staticBytes(const TensorSpec &spec) { return cacheRowBytes(spec); }

SessionMemory sessionMemory(const ArtifactSpec &spec) {
  SessionMemory m;
  const EntrySpec *prefill = spec.findEntry("prefill");
  if (!prefill)
    return m;
  for (const TensorSpec &s : prefill->outputs) {
    if (s.role == TensorRole::kState)
      m.stateBytes += staticBytes(s);
    else if (s.role == TensorRole::kCache)
      m.cacheBytesPerToken += cacheRowBytes(s);
  }
  return m;
}

/// Buffers and launches of a GPU entry (docs/runtime-abi.md).
Status validateGpuEntry(const EntrySpec &entry, size_t index,
                        const ArtifactSpec &artifact) {
  const std::string where =
      "entry " + std::to_string(index) + " " + quoted(entry.name);
  if (entry.name.empty())
    return fail(where, "empty entry name");
  if (entry.buffers.empty())
    return fail(where, "a GPU entry without buffers");
  std::set<std::string> names;
  for (size_t i = 0; i < entry.buffers.size(); ++i) {
    const BufferSpec &b = entry.buffers[i];
    std::string w = where + ": buffer " + std::to_string(i) + " " + quoted(b.name);
    if (b.name.empty())
      return fail(w, "empty name");
    if (!names.insert(b.name).second)
      return fail(w, "duplicate buffer name");
    if (static_cast<uint8_t>(b.kind) > kLastBufferKind)
      return fail(w, "invalid kind " + std::to_string(static_cast<unsigned>(b.kind)));
    if (b.dtype == DType::kInvalid || static_cast<uint8_t>(b.dtype) > kLastDType ||
        dtypeSize(b.dtype) == 0)
      return fail(w, "invalid or sub-byte dtype " + dtypeName(b.dtype));
    if (b.shape.empty() || b.shape.size() > kMaxRank)
      return fail(w, "rank " + std::to_string(b.shape.size()) +
                         " must be in [1, " + std::to_string(kMaxRank) + "]");
    for (size_t d = 0; d < b.shape.size(); ++d)
      if (b.shape[d] <= 0)
        return fail(w, "dimension " + std::to_string(d) + " is " +
                           std::to_string(b.shape[d]) + " (GPU buffers are static)");
    int64_t numel = 0;
    if (!checkedNumel(b.shape, numel) ||
        numel > kMaxTensorBytes / static_cast<int64_t>(dtypeSize(b.dtype)))
      return fail(w, "shape " + shapeToString(b.shape) + " is too large");
    if (b.kind == BufferKind::kConstant) {
      if (b.data.size() != b.bytes())
        return fail(w, "constant data holds " + std::to_string(b.data.size()) +
                           " bytes, the shape needs " + std::to_string(b.bytes()));
    } else if (!b.data.empty()) {
      return fail(w, std::string("a ") + bufferKindName(b.kind) +
                         " buffer carries data");
    }
  }
  for (size_t i = 0; i < entry.launches.size(); ++i) {
    const LaunchSpec &l = entry.launches[i];
    std::string w = where + ": launch " + std::to_string(i) + " " + quoted(l.function);
    if (l.function.empty())
      return fail(w, "empty function name");
    if (l.kernel >= artifact.kernels.size())
      return fail(w, "kernel index " + std::to_string(l.kernel) + " out of range (" +
                         std::to_string(artifact.kernels.size()) + " kernels)");
    KernelKind kind = artifact.kernels[l.kernel].kind;
    if (kind != KernelKind::kPtx && kind != KernelKind::kCubin)
      return fail(w, std::string("kernel ") + std::to_string(l.kernel) + " is " +
                         kernelKindName(kind) + ", not ptx or cubin");
    uint64_t threads = 1;
    for (int d = 0; d < 3; ++d) {
      if (l.grid[d] == 0 || l.block[d] == 0)
        return fail(w, "grid and block need 3 positive dimensions");
      threads *= l.block[d];
    }
    if (threads > 1024)
      return fail(w, "block of " + std::to_string(threads) +
                         " threads exceeds 1024");
    for (size_t j = 0; j < l.args.size(); ++j)
      if (l.args[j] >= entry.buffers.size())
        return fail(w, "argument " + std::to_string(j) + " names buffer " +
                           std::to_string(l.args[j]) + " of " +
                           std::to_string(entry.buffers.size()));
  }
  return Status::ok();
}

Status validateKernelLibrary(const ArtifactSpec &a) {
  if (a.target.kind != TargetKind::kSm90a)
    return invalidArtifact("target: a kernel library needs a GPU target, got " +
                           quoted(a.target.name()));
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const KernelImage &k = a.kernels[i];
    std::string where = "kernel " + std::to_string(i) + " " + quoted(k.name);
    if (k.kind != KernelKind::kPtx && k.kind != KernelKind::kCubin)
      return fail(where, std::string("kind ") + kernelKindName(k.kind) +
                             " in a GPU kernel library");
    if (k.image.empty())
      return fail(where, "empty image");
  }
  std::set<std::string> entryNames;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    KIMI_RETURN_IF_ERROR(validateGpuEntry(a.entries[i], i, a));
    if (!entryNames.insert(a.entries[i].name).second)
      return invalidArtifact("entry " + std::to_string(i) + " " +
                             quoted(a.entries[i].name) + ": duplicate entry name");
  }
  if (!a.weights.empty())
    return invalidArtifact("a GPU kernel library carries no weights");
  return Status::ok();
}

Status validateArtifact(const ArtifactSpec &a) {
  if (a.formatVersion != kArtifactFormatVersion)
    return invalidArtifact("unsupported format_version " +
                           std::to_string(a.formatVersion) +
                           " (this runtime reads version " +
                           std::to_string(kArtifactFormatVersion) + ")");
  if (a.isKernelLibrary())
    return validateKernelLibrary(a);
  const ModelInfo &m = a.model;
  if (m.vocabSize <= 0 || m.vocabSize > INT32_MAX)
    return invalidArtifact("model: vocab_size " + std::to_string(m.vocabSize) +
                           " out of range [1, 2^31)");
  if (m.hiddenSize <= 0)
    return invalidArtifact("model: hidden_size " + std::to_string(m.hiddenSize) +
                           " must be positive");
  if (m.numLayers < 0)
    return invalidArtifact("model: num_layers " + std::to_string(m.numLayers) +
                           " is negative");
  if (m.layerKinds.size() != static_cast<size_t>(m.numLayers))
    return invalidArtifact("model: layer_kinds has " +
                           std::to_string(m.layerKinds.size()) +
                           " letters for " + std::to_string(m.numLayers) +
                           " layers");
  for (size_t i = 0; i < m.layerKinds.size(); ++i)
    if (m.layerKinds[i] != 'K' && m.layerKinds[i] != 'M')
      return invalidArtifact("model: layer_kinds letter " + std::to_string(i) +
                             " is " + quoted(m.layerKinds.substr(i, 1)) +
                             " (expected 'K' or 'M')");
  if (m.maxPositions < 0)
    return invalidArtifact("model: max_position_embeddings " +
                           std::to_string(m.maxPositions) + " is negative");

  if (a.target.kind == TargetKind::kInvalid ||
      static_cast<uint8_t>(a.target.kind) > kLastTargetKind)
    return invalidArtifact("target: invalid kind " +
                           std::to_string(static_cast<unsigned>(a.target.kind)));
  if (a.target.numRanks < 1)
    return invalidArtifact("target: num_ranks " +
                           std::to_string(a.target.numRanks) + " must be >= 1");
  if (!a.target.gridShape.empty()) {
    int64_t product = 1;
    for (int32_t n : a.target.gridShape) {
      if (n < 1)
        return invalidArtifact("target: grid_shape " +
                               shapeToString(std::vector<int64_t>(
                                   a.target.gridShape.begin(),
                                   a.target.gridShape.end())) +
                               " has an axis < 1");
      product *= n;
    }
    if (a.target.gridShape.size() > kMaxGridAxes || product != a.target.numRanks)
      return invalidArtifact(
          "target: grid_shape " +
          shapeToString(std::vector<int64_t>(a.target.gridShape.begin(),
                                             a.target.gridShape.end())) +
          " does not describe num_ranks " + std::to_string(a.target.numRanks) +
          " (at most " + std::to_string(kMaxGridAxes) + " axes)");
  }
  if (a.target.dataParallel < 1 ||
      a.target.numRanks % a.target.dataParallel != 0)
    return invalidArtifact("target: data_parallel " +
                           std::to_string(a.target.dataParallel) +
                           " does not divide num_ranks " +
                           std::to_string(a.target.numRanks));

  if (a.kernels.empty())
    return invalidArtifact("artifact has no kernels");
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const KernelImage &k = a.kernels[i];
    std::string where = "kernel " + std::to_string(i) + " " + quoted(k.name);
    if (static_cast<uint8_t>(k.kind) > kLastKernelKind)
      return fail(where, "invalid kind " +
                             std::to_string(static_cast<unsigned>(k.kind)));
    if (k.image.empty())
      return fail(where, "empty image");
    if (a.target.kind == TargetKind::kCpu &&
        k.kind != KernelKind::kCpuSharedObject)
      return fail(where, std::string("kind ") + kernelKindName(k.kind) +
                             " on target 'cpu' (expected cpu_shared_object)");
  }

  if (a.entries.empty())
    return invalidArtifact("artifact has no entries");
  std::set<std::string> entryNames;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    KIMI_RETURN_IF_ERROR(validateEntry(a.entries[i], i, a));
    if (!entryNames.insert(a.entries[i].name).second)
      return invalidArtifact("entry " + std::to_string(i) + " " +
                             quoted(a.entries[i].name) + ": duplicate entry name");
  }
  KIMI_RETURN_IF_ERROR(validateSessionContract(a));
  KIMI_RETURN_IF_ERROR(validateWeights(a));
  return Status::ok();
}

} // namespace kimi::rt
