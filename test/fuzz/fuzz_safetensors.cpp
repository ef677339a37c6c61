//===- fuzz_safetensors.cpp - libFuzzer target: the safetensors reader ----===//
//
// Any bytes given to SafetensorsFile::fromBytes are accepted or refused; an
// accepted file's every tensor lies inside the bytes (each one is read
// whole, so AddressSanitizer sees an escape) and the weight loader turns it
// into f32 or refuses it without crashing.
//
//===----------------------------------------------------------------------===//

#include "runtime/weights/safetensors.h"
#include "runtime/weights/weight_loader.h"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace kimi::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::fromBytes(bytes, "fuzz.safetensors");
  if (!file.isOk())
    return 0;
  std::vector<WeightSpec> specs;
  volatile uint8_t sink = 0;
  for (const TensorView &t : file.value()->tensors()) {
    for (uint64_t i = 0; i < t.nbytes; ++i)
      sink = sink ^ t.data[i];
    int64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= d;
    if (numel > 0 && numel <= (1 << 16) && !t.shape.empty())
      specs.push_back({t.name, {}, t.shape, DType::kF32, "fuzz"});
  }
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(file.value()));
  StatusOr<std::unique_ptr<WeightLoader>> loader =
      WeightLoader::fromFiles(std::move(files));
  if (!loader.isOk())
    return 0;
  for (const WeightSpec &spec : specs) {
    int64_t numel = 1;
    for (int64_t d : spec.shape)
      numel *= d;
    std::vector<float> out(static_cast<size_t>(numel));
    (void)loader.value()->load(spec, out.data(), out.size() * sizeof(float));
  }
  return 0;
}
