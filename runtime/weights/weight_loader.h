//===- weight_loader.h - Fills weight buffers from safetensors --*- C++ -*-===//
//
// Given the artifact's weight manifest, finds each weight in one or more
// safetensors files and converts it to its compute dtype in place:
//
//  * names tried, in order: the canonical name, then each alias; each also
//    with the `language_model.` prefix of released multimodal checkpoints;
//  * a name with `{e}` is a stack of E experts (E = leading dim of the
//    logical shape): first a single stacked tensor under the literal name,
//    otherwise the per-expert tensors with e = 0..E-1 substituted;
//  * F32 / BF16 / F16 tensors are converted element-wise; a U8 tensor whose
//    last dim is W/2 is MXFP4 (two E2M1 codes per byte, low nibble first)
//    with scales in `<name>_scale` (U8 or F8_E8M0, [..., W/32]). The values
//    may also be stored as `<name>_packed` (compressed-tensors spelling).
//
// Every error names the weight and the tensor: missing (with the spellings
// tried), wrong shape (expected vs found), unsupported dtype, a NaN or
// infinity (unless allowed) or an E8M0 NaN scale, a file that shrank while
// it was read (copied out of the mapping by copyFromMapping, so truncation
// is an error and not SIGBUS).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_WEIGHT_LOADER_H
#define KIMI_RUNTIME_WEIGHTS_WEIGHT_LOADER_H

#include "runtime/artifact/types.h"
#include "runtime/support/status.h"
#include "runtime/weights/safetensors.h"

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kimi::rt {

class WeightLoader {
public:
  /// Opens (maps) every path: a safetensors file, an index, or a directory
  /// (runtime/weights/checkpoint.h); a tensor name present in two files is
  /// an error.
  static StatusOr<std::unique_ptr<WeightLoader>>
  open(const std::vector<std::string> &paths);
  /// Uses files opened by the caller.
  static StatusOr<std::unique_ptr<WeightLoader>>
  fromFiles(std::vector<std::unique_ptr<SafetensorsFile>> files);

  /// Converts weight `spec` into `dst`, which holds exactly
  /// numel(spec.shape) x dtypeSize(spec.dtype) bytes (`dstBytes`).
  Status load(const WeightSpec &spec, void *dst, size_t dstBytes) const;
  /// Partitioned artifacts: converts rank `rank`'s block of `spec` (block
  /// `rank % shardParts` along `shardDim`, or the whole tensor when it is
  /// not split) into `dst`, which holds blockNumel() elements (`dstBytes`).
  Status loadBlock(const WeightSpec &spec, int32_t rank, void *dst,
                   size_t dstBytes) const;

  /// The names tried for `spec`, with `{e}` replaced by `expert` when
  /// `expert >= 0` (left literal otherwise).
  static std::vector<std::string> spellings(const WeightSpec &spec,
                                            int64_t expert = -1);

  /// The tensor called `name` in any file, with its file; null if absent.
  const TensorView *find(const std::string &name,
                         const SafetensorsFile **file = nullptr) const;

  const std::vector<std::unique_ptr<SafetensorsFile>> &files() const {
    return files_;
  }

  /// NaN and infinities in dense tensors: refused by default (the error
  /// names the tensor and the first element), loaded when allowed.
  void setAllowNonFinite(bool allow) { allowNonFinite_ = allow; }

  /// Tensors (and their bytes) read so far, MXFP4 scales counted as tensors.
  struct Progress {
    int64_t tensors = 0;
    uint64_t bytes = 0;
  };
  /// Called after each tensor is read (for a progress line on a terminal).
  void setProgressCallback(std::function<void(const Progress &)> callback) {
    onProgress_ = std::move(callback);
  }
  const Progress &progress() const { return progress_; }
  /// What the checkpoint holds for the text model (skipped tensors aside):
  /// the totals a full load reads.
  Progress checkpointTotals() const;

  /// Tensors of a multimodal release that kimi never reads (the vision
  /// tower and its projector, `vision_tower.*`, `mm_projector.*`).
  static bool isSkippedTensor(const std::string &name);
  int64_t skippedTensors() const;

private:
  WeightLoader() = default;
  void noteLoaded(const TensorView &t) const;

  /// Loads one tensor of logical `shape` found under one of `names` into
  /// `dst`; `found` says whether any of the names exists.
  Status loadPiece(const WeightSpec &spec, const std::vector<std::string> &names,
                   const std::vector<int64_t> &shape, uint8_t *dst,
                   bool &found) const;

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  bool allowNonFinite_ = false;
  mutable Progress progress_;
  std::function<void(const Progress &)> onProgress_;
  std::unordered_map<std::string, std::pair<size_t, const TensorView *>> index_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_WEIGHT_LOADER_H
