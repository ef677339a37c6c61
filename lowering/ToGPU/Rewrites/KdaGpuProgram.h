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

/// Where a generated kernel sequence goes: its kernels, the buffers they
/// read and write, and its launches. A kernel library's entry records them
/// as the artifact's buffer and launch specs (GpuEntryPlanBuilder); a model
/// pass emits them as IR at the op it replaces (memrefs of the op's
/// operands, allocations, `gpu.launch_func`). Buffers are numbered in the
/// order they are made.
class KernelSequenceSink {
public:
  virtual ~KernelSequenceSink();
  /// The gpu.module the kernels are generated into.
  virtual mlir::gpu::GPUModuleOp kernelModule() = 0;
  /// The op's operand `operand`, read as `type` values of `shape` (`name`
  /// in an entry).
  virtual uint32_t input(llvm::StringRef name, mlir::Value operand,
                         mlir::Type type, std::vector<int64_t> shape) = 0;
  /// i32 offsets i * length of `sequences` + 1 sequences of one length.
  virtual uint32_t sequenceOffsets(int64_t sequences, int64_t length) = 0;
  /// A result of the op (written by the launches).
  virtual uint32_t output(llvm::StringRef name, mlir::Type type,
                          std::vector<int64_t> shape) = 0;
  /// Scratch between the launches.
  virtual uint32_t temporary(llvm::StringRef name, mlir::Type type,
                             std::vector<int64_t> shape) = 0;
  virtual void launch(llvm::StringRef function, std::array<int64_t, 3> grid,
                      int64_t threads, std::vector<uint32_t> args) = 0;
};

/// Assembles a GpuEntryPlan: loads the dialects the generators emit, makes
/// the (empty) `gpu.module` they fill, and records buffers and launches.
class GpuEntryPlanBuilder final : public KernelSequenceSink {
public:
  GpuEntryPlanBuilder(mlir::MLIRContext *ctx, mlir::Location loc,
                      llvm::StringRef entryName, llvm::StringRef moduleName);
  /// Appends a buffer of element type `type` (f32, bf16, f16 or i32);
  /// returns its index.
  uint32_t add(std::string name, rt::BufferKind kind, mlir::Type type,
               std::vector<int64_t> shape);

  mlir::gpu::GPUModuleOp kernelModule() override { return module; }
  uint32_t input(llvm::StringRef name, mlir::Value, mlir::Type type,
                 std::vector<int64_t> shape) override {
    return add(name.str(), rt::BufferKind::kInput, type, std::move(shape));
  }
  /// A constant of the entry, "cu_seqlens".
  uint32_t sequenceOffsets(int64_t sequences, int64_t length) override;
  uint32_t output(llvm::StringRef name, mlir::Type type,
                  std::vector<int64_t> shape) override {
    return add(name.str(), rt::BufferKind::kOutput, type, std::move(shape));
  }
  uint32_t temporary(llvm::StringRef name, mlir::Type type,
                     std::vector<int64_t> shape) override {
    return add(name.str(), rt::BufferKind::kTemporary, type, std::move(shape));
  }
  void launch(llvm::StringRef function, std::array<int64_t, 3> grid,
              int64_t threads, std::vector<uint32_t> args) override;

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

/// What buildKdaKernels made of the op's results: the sink's buffers of
/// `out` and `final_state`, and one line on the strategy (segments, grid).
struct KdaKernelSequence {
  uint32_t out = 0, finalState = 0;
  std::string summary;
};

/// Generates `op`'s kernels into `sink` and its buffers and launches
/// (prefill or decode, a producing kimi.kda_gate fused). Checks everything
/// before the sink sees anything: on failure (an error naming the op and
/// the field at fault) the sink is untouched.
llvm::FailureOr<KdaKernelSequence> buildKdaKernels(KdaOp op,
                                                   KernelSequenceSink &sink,
                                                   const KdaPlanOptions &options);

/// Plans `op` as entry `name` of a kernel library (buildKdaKernels into a
/// GpuEntryPlanBuilder).
llvm::FailureOr<GpuEntryPlan> planKdaEntry(KdaOp op, llvm::StringRef name,
                                           const KdaPlanOptions &options);

} // namespace kimi::gpu

#endif
