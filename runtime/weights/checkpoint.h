//===- checkpoint.h - Opens a checkpoint: files, directories, indexes -*- C++ -*-===//
//
// What a user points `--weights` at, turned into mapped safetensors files:
//
//  * a `.safetensors` file, as is;
//  * a `model.safetensors.index.json` (or a directory holding one): the
//    shards its `weight_map` names, in the index's directory, and the index
//    checked against them. Every tensor must be in the shard the index names,
//    every shard the index names must exist, every tensor of a shard must be
//    listed for that shard, and the directory must hold no `.safetensors`
//    file the index does not list. Each error names the file and the tensor;
//  * a directory without an index: its `.safetensors` files, sorted.
//
// Files are mapped, never read whole: a tensor's bytes are touched once, when
// the loader converts it.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_CHECKPOINT_H
#define KIMI_RUNTIME_WEIGHTS_CHECKPOINT_H

#include "runtime/support/status.h"
#include "runtime/weights/safetensors.h"

#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

/// The name of a sharded checkpoint's index (Hugging Face's convention).
inline constexpr const char *kSafetensorsIndexName = "model.safetensors.index.json";

/// Opens every path (file, index or directory, as above), in order.
StatusOr<std::vector<std::unique_ptr<SafetensorsFile>>>
openCheckpoint(const std::vector<std::string> &paths);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_CHECKPOINT_H
