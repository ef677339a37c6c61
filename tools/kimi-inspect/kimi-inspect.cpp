//===- kimi-inspect.cpp - print what a compiled artifact holds ------------===//
//
// kimi-inspect MODEL.kimi prints the artifact's target, entries, kernels and
// weight manifest (name, shape, stored dtype, bytes a rank holds) as JSON,
// with the weight bytes in total and by dtype: what a step can read at most
// and what the device holds. It reads the file through the runtime's
// verifying reader, so a corrupt artifact is refused here exactly as
// kimi-run refuses it.
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/checksum.h"
#include "runtime/artifact/reader.h"
#include "runtime/artifact/validate.h"
#include "runtime/support/text.h"
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

using namespace kimi::rt;

namespace {

const char *kUsage =
    "usage: kimi-inspect MODEL.kimi [--weights-only]\n"
    "\n"
    "Prints a compiled artifact as JSON: format version, the compiler, the\n"
    "file's checksum (XXH3-64, checked on reading like every kernel's), model\n"
    "metadata with the config's digest, target (name, ranks, grid), kernels\n"
    "(kind, bytes, checksum), entries (inputs and\n"
    "outputs with role, dtype and shape; launches and buffers of GPU entries),\n"
    "and the weight manifest: each weight's checkpoint name, logical shape,\n"
    "stored dtype and the bytes one rank holds, then the totals (all weights,\n"
    "and per dtype). --weights-only prints the manifest and totals only.\n";

std::string shapeJson(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

void printTensors(const char *key, const std::vector<TensorSpec> &tensors) {
  std::printf("      %s: [", jsonQuoted(key).c_str());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec &t = tensors[i];
    std::printf("%s\n        {\"name\": %s, \"role\": %s, \"dtype\": %s, "
                "\"shape\": %s}",
                i ? "," : "", jsonQuoted(t.name).c_str(),
                jsonQuoted(roleName(t.role)).c_str(),
                jsonQuoted(dtypeName(t.dtype)).c_str(), shapeJson(t.shape).c_str());
  }
  std::printf("%s]", tensors.empty() ? "" : "\n      ");
}

void printWeights(const ArtifactSpec &a) {
  std::map<std::string, int64_t> byDtype;
  int64_t total = 0;
  std::printf("  \"weights\": [");
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const WeightSpec &w = a.weights[i];
    const int64_t bytes = storedBytes(w.dtype, w.blockNumel());
    total += bytes;
    byDtype[dtypeName(w.dtype)] += bytes;
    std::printf("%s\n    {\"name\": %s, \"shape\": %s, \"dtype\": %s, "
                "\"bytes\": %lld",
                i ? "," : "", jsonQuoted(w.name).c_str(), shapeJson(w.shape).c_str(),
                jsonQuoted(dtypeName(w.dtype)).c_str(),
                static_cast<long long>(bytes));
    if (w.shardDim >= 0)
      std::printf(", \"shard_dim\": %d, \"shard_parts\": %d", w.shardDim,
                  w.shardParts);
    std::printf("}");
  }
  std::printf("\n  ],\n  \"weight_bytes\": %lld,\n  \"weight_bytes_by_dtype\": {",
              static_cast<long long>(total));
  bool first = true;
  for (const auto &[dtype, bytes] : byDtype) {
    std::printf("%s%s: %lld", first ? "" : ", ", jsonQuoted(dtype).c_str(),
                static_cast<long long>(bytes));
    first = false;
  }
  std::printf("}\n");
}

} // namespace

int main(int argc, char **argv) {
  const char *path = nullptr;
  bool weightsOnly = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!std::strcmp(argv[i], "--weights-only")) {
      weightsOnly = true;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      std::fprintf(stderr, "kimi-inspect: error: unknown option '%s'\n%s",
                   argv[i], kUsage);
      return 2;
    } else if (path) {
      std::fprintf(stderr, "kimi-inspect: error: give one artifact\n%s", kUsage);
      return 2;
    } else {
      path = argv[i];
    }
  }
  if (!path) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  StatusOr<ArtifactSpec> read = ArtifactReader::readFile(path);
  if (!read.isOk()) {
    std::fprintf(stderr, "kimi-inspect: error: %s\n",
                 read.status().message().c_str());
    return 1;
  }
  const ArtifactSpec &a = read.value();
  std::printf("{\n");
  if (!weightsOnly) {
    const ModelInfo &m = a.model;
    std::printf("  \"format_version\": %u,\n", a.formatVersion);
    std::printf("  \"compiler\": %s,\n", jsonQuoted(a.compiler).c_str());
    std::printf("  \"checksum\": %s,\n", jsonQuoted(digestText(a.fileDigest)).c_str());
    std::printf("  \"model\": {\"model_type\": %s, \"vocab_size\": %lld, "
                "\"hidden_size\": %lld, \"num_layers\": %d, \"layer_kinds\": "
                "%s, \"max_positions\": %lld, \"config_digest\": %s},\n",
                jsonQuoted(m.modelType).c_str(), static_cast<long long>(m.vocabSize),
                static_cast<long long>(m.hiddenSize), m.numLayers,
                jsonQuoted(m.layerKinds).c_str(),
                static_cast<long long>(m.maxPositions),
                jsonQuoted(m.configDigest ? digestText(m.configDigest) : "").c_str());
    const std::vector<int32_t> axes = a.target.grid();
    const std::vector<int64_t> grid(axes.begin(), axes.end());
    std::printf("  \"target\": {\"name\": %s, \"ranks\": %d, \"grid\": %s, "
                "\"data_parallel\": %d},\n",
                jsonQuoted(a.target.name()).c_str(), a.target.numRanks,
                shapeJson(grid).c_str(), a.target.dataParallel);
    std::printf("  \"kernels\": [");
    for (size_t i = 0; i < a.kernels.size(); ++i)
      std::printf("%s\n    {\"name\": %s, \"kind\": %s, \"bytes\": %zu, "
                  "\"checksum\": %s}",
                  i ? "," : "", jsonQuoted(a.kernels[i].name).c_str(),
                  jsonQuoted(kernelKindName(a.kernels[i].kind)).c_str(),
                  a.kernels[i].image.size(),
                  jsonQuoted(digestText(a.kernels[i].checksum)).c_str());
    std::printf("\n  ],\n  \"entries\": [");
    for (size_t i = 0; i < a.entries.size(); ++i) {
      const EntrySpec &e = a.entries[i];
      std::printf("%s\n    {\n      \"name\": %s,\n", i ? "," : "",
                  jsonQuoted(e.name).c_str());
      printTensors("inputs", e.inputs);
      std::printf(",\n");
      printTensors("outputs", e.outputs);
      std::printf(",\n      \"launches\": %zu, \"buffers\": %zu\n    }",
                  e.launches.size(), e.buffers.size());
    }
    std::printf("\n  ],\n");
    const SessionMemory session = sessionMemory(a);
    std::printf("  \"session_memory\": {\"state_bytes\": %lld, "
                "\"cache_bytes_per_token\": %lld},\n",
                static_cast<long long>(session.stateBytes),
                static_cast<long long>(session.cacheBytesPerToken));
  }
  printWeights(a);
  std::printf("}\n");
  return 0;
}
