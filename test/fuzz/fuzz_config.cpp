//===- fuzz_config.cpp - libFuzzer target: the model config reader --------===//
//
// kimi-compile's reader of HF config.json files: any text is a ModelConfig
// whose checks passed or an error naming the field; never a crash (deep
// nesting, huge numbers, duplicate keys included).
//
//===----------------------------------------------------------------------===//

#include "models/import/ModelConfig.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::Expected<kimi::ModelConfig> config = kimi::parseModelConfig(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.json",
      kimi::ConfigReadOptions());
  if (!config)
    llvm::consumeError(config.takeError());
  return 0;
}
