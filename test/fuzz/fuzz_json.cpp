//===- fuzz_json.cpp - libFuzzer target: the runtime's JSON parser --------===//
//
// The parser of safetensors headers and checkpoint indexes: any bytes are a
// value or an error (nesting is bounded, so no stack overflow).
//
//===----------------------------------------------------------------------===//

#include "runtime/weights/json.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)kimi::rt::parseJson(reinterpret_cast<const char *>(data), size);
  return 0;
}
