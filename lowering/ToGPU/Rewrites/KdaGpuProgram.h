//===- KdaGpuProgram.h - a kimi.kda op as a GPU entry ------------*- C++ -*-===//
//
// Turns one chunked `kimi.kda` op (static shapes, `#kimi.decay` from
// `kimi-chunk-kda`) into a GPU entry: a `gpu.module` of generated kernels,
// the entry's buffers and its launch sequence (docs/lowering/gpu-kda.md).
//
//   T > 1 (prefill):  kda_prep, then kda_recur, or with a sequence split
//                     kda_prep, kda_summarize, kda_fold, kda_recur
//   T == 1 (decode):  kda_decode, the state updated in place
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KDAGPUPROGRAM_H
#define KIMI_LOWERING_TOGPU_KDAGPUPROGRAM_H

#include "dialects/Kimi/KimiOps.h"
#include "runtime/artifact/types.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <array>
#include <string>
#include <vector>

namespace kimi::gpu {

/// What the launch planning assumes of the device.
struct GpuDeviceModel {
  int smCount = 132;    // H200
};

/// A planned GPU entry; `launches[i].kernel` is left 0 (the artifact writer
/// sets the image index).
struct GpuEntryPlan {
  std::string name;
  mlir::OwningOpRef<mlir::ModuleOp> kernels; // one gpu.module
  std::vector<rt::BufferSpec> buffers;
  std::vector<rt::LaunchSpec> launches;
  std::string summary; // one line: strategy, segments, grid sizes
};

/// Assembles a GpuEntryPlan: loads the dialects the generators emit, makes
/// the (empty) `gpu.module` they fill, and records buffers and launches.
class GpuEntryPlanBuilder {
public:
  GpuEntryPlanBuilder(mlir::MLIRContext *ctx, mlir::Location loc,
                      llvm::StringRef entryName, llvm::StringRef moduleName);
  /// Appends a buffer of element type `type` (f32, bf16, f16 or i32);
  /// returns its index.
  uint32_t add(std::string name, rt::BufferKind kind, mlir::Type type,
               std::vector<int64_t> shape);
  void launch(std::string function, std::array<int64_t, 3> grid, int64_t threads,
              std::vector<uint32_t> args);

  GpuEntryPlan plan;
  mlir::gpu::GPUModuleOp module;
};

struct KdaPlanOptions {
  GpuDeviceModel device;
  /// Sequence split P; 0 picks it from the cost model.
  int64_t segments = 0;
  /// Blocks per state along the value columns; 0 picks it.
  int64_t valueSplit = 0;
};

/// Blocks per (sequence, head) along the value columns (1 or 2) for
/// recurrences of `chunks` chunks.
int64_t chooseKdaValueSplit(int64_t sequences, int64_t heads, int64_t chunks,
                            int64_t dv, const GpuDeviceModel &device);

/// The segment count that minimises the modelled recurrence time for
/// `sequences * heads` recurrences of `chunks` chunks each.
int64_t chooseKdaSegments(int64_t sequences, int64_t heads, int64_t chunks,
                          const GpuDeviceModel &device);

/// Plans `op` as entry `name`. Errors name the op and the field at fault.
llvm::FailureOr<GpuEntryPlan> planKdaEntry(KdaOp op, llvm::StringRef name,
                                           const KdaPlanOptions &options);

} // namespace kimi::gpu

#endif
