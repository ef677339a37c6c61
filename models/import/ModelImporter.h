//===- ModelImporter.h - config -> kimi IR ----------------------*- C++ -*-===//
//
// Builds the whole model in the kimi dialect from a validated ModelConfig:
// a `@prefill` and a `@decode` function, each calling one private function
// per decoder layer, with weights as `kimi.weight` symbols carrying their
// Hugging Face names.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_MODELS_IMPORT_MODELIMPORTER_H
#define KIMI_MODELS_IMPORT_MODELIMPORTER_H

#include "models/import/ModelConfig.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

namespace mlir {
class DialectRegistry;
class MLIRContext;
} // namespace mlir

namespace kimi {

enum class NumericType { F32, BF16 };

struct ImportOptions {
  /// Element type of activations between ops.
  NumericType activations = NumericType::BF16;
  /// Storage type of dense weights (projections, norms, embeddings).
  NumericType weights = NumericType::BF16;
  /// Routed experts stored as MXFP4 (f4E2M1FN + f8E8M0FNU per 32 values).
  bool mxfp4Experts = true;
  /// Sequences per prefill step (the `B` of `@prefill`'s tokens [B, T]):
  /// the sequences of every data-parallel group together.
  int64_t prefillBatch = 1;
  /// Sequences per decode step (the `B` of `@decode`).
  int64_t decodeBatch = 1;
  /// 0: `@prefill` takes whole sequences of any (common) length from zero
  /// state. N > 0: `@prefill` is a stateful step over exactly N tokens per
  /// sequence taking the state like `@decode`, so a sequence is prefilled
  /// chunk by chunk with static shapes (what the CPU target compiles).
  int64_t prefillChunk = 0;
  /// Stateful entries take `cache_length : [B]` (i32, the valid rows of each
  /// sequence's MLA caches) as their last argument, and their caches may be
  /// padded past it: the new rows are written at that length
  /// (`kimi.cache_insert`) and attention masks the padding
  /// (`kimi.mla_decode ... lengths`). One compiled shape then serves a range
  /// of cache lengths, which a replayed CUDA graph of the decode step needs.
  bool cacheLengths = false;
  /// `@prefill` returns the logits of each sequence's last token only,
  /// [B, 1, V]: the final norm and LM head run on one row per sequence
  /// instead of every token's (a chunked prefill's earlier chunks compute
  /// none they would discard; K3's vocabulary makes a 2048-token chunk's
  /// logits 1.3 GB of f32).
  bool lastLogitsOnly = false;
};

/// Registers the dialects the imported IR uses.
void registerImportDialects(mlir::DialectRegistry &registry);

/// Builds the model. Fails (naming the config field) when the options cannot
/// represent the model, e.g. MXFP4 experts whose widths are not multiples of
/// 32.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importModel(const ModelConfig &config, const ImportOptions &options,
            mlir::MLIRContext &context);

} // namespace kimi

#endif
