//===- random_weights.cpp - deterministic random weights ------------------===//

#include "runtime/weights/random_weights.h"
#include "runtime/weights/mxfp4.h"
#include "runtime/weights/safetensors_writer.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace kimi::rt {
namespace {

uint64_t fnv1a64(const std::string &text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// value = offset + spread * U(-1, 1), by the tensor's role in the model.
void recipe(const std::string &name, const std::vector<int64_t> &shape,
            double &offset, double &spread) {
  offset = 0.0;
  if (endsWith(name, "embed_tokens.weight")) {
    spread = std::sqrt(3.0);
  } else if (endsWith(name, "norm.weight") || endsWith(name, "layernorm.weight")) {
    offset = 1.0;
    spread = 0.1;
  } else if (endsWith(name, "A_log")) {
    spread = 1.0;
  } else if (endsWith(name, "dt_bias")) {
    offset = -2.0;
    spread = 4.0;
  } else if (endsWith(name, "e_score_correction_bias")) {
    spread = 0.05;
  } else {
    spread = std::sqrt(3.0 / double(shape.empty() ? 1 : shape.back()));
  }
}

} // namespace

RandomWeightRecipe randomWeightRecipe(const std::string &name,
                                      const std::vector<int64_t> &shape,
                                      uint64_t seed) {
  RandomWeightRecipe r;
  recipe(name, shape, r.offset, r.spread);
  r.state = seed ^ fnv1a64(name);
  return r;
}

std::vector<float> randomWeight(const std::string &name,
                                const std::vector<int64_t> &shape,
                                uint64_t seed) {
  const RandomWeightRecipe r = randomWeightRecipe(name, shape, seed);
  const double offset = r.offset, spread = r.spread;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t state = r.state;
  for (float &v : out) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = double(z >> 11) * 0x1.0p-53;
    v = static_cast<float>(offset + spread * (2.0 * u - 1.0));
  }
  return out;
}

Status writeRandomWeights(const ArtifactSpec &artifact, uint64_t seed,
                          const std::string &path) {
  SafetensorsWriter writer;
  writer.addMetadata("format", "pt");
  writer.addMetadata("kimi.random_seed", std::to_string(seed));
  for (const WeightSpec &w : artifact.weights) {
    if (w.dtype == DType::kF8E8M0)
      continue; // written with its MXFP4 values
    std::vector<float> values = randomWeight(w.name, w.shape, seed);
    if (w.dtype != DType::kF4E2M1) {
      writer.addF32(w.name, w.shape, values);
      continue;
    }
    // An MXFP4 weight: the values quantised as a checkpoint stores them,
    // packed codes and their `<name>_scale`.
    const int64_t width = w.shape.back();
    if (width % kMxBlock)
      return invalidArgument("weight " + w.name + ": MXFP4 needs a last "
                             "dimension that is a multiple of 32");
    const int64_t rows = static_cast<int64_t>(values.size()) / width;
    std::vector<uint8_t> packed(values.size() / 2),
        scales(static_cast<size_t>(rows * (width / kMxBlock)));
    std::vector<double> row(static_cast<size_t>(width));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(values.begin() + r * width, values.begin() + (r + 1) * width,
                row.begin());
      quantizeMxfp4Row(row.data(), width, packed.data() + r * (width / 2),
                       scales.data() + r * (width / kMxBlock));
    }
    std::vector<int64_t> packedShape = w.shape, scaleShape = w.shape;
    packedShape.back() = width / 2;
    scaleShape.back() = width / kMxBlock;
    writer.add(w.name, StDType::kU8, packedShape, packed.data(), packed.size());
    writer.add(w.name + "_scale", StDType::kU8, scaleShape, scales.data(),
               scales.size());
  }
  return writer.write(path);
}

StatusOr<std::unique_ptr<WeightLoader>>
openRandomWeights(const ArtifactSpec &artifact, uint64_t seed, const std::string &keepAs) {
  std::string file = keepAs, temporary;
  if (file.empty()) {
    char tmpl[] = "/tmp/kimi-weights-XXXXXX";
    int fd = ::mkstemp(tmpl);
    if (fd < 0)
      return ioError(std::string("cannot create a temporary file: ") + std::strerror(errno));
    ::close(fd);
    file = temporary = tmpl;
  }
  Status s = writeRandomWeights(artifact, seed, file);
  StatusOr<std::unique_ptr<WeightLoader>> loader =
      s.isOk() ? WeightLoader::open({file})
               : StatusOr<std::unique_ptr<WeightLoader>>(std::move(s));
  if (!temporary.empty())
    ::unlink(temporary.c_str()); // mapped: the data stays until unmapped
  return loader;
}

} // namespace kimi::rt
