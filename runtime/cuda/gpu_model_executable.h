//===- gpu_model_executable.h - A GPU model artifact ready to run -*- C++
//-*-===//
//
// Runs the GPU model target (docs/runtime-abi.md, "GPU models"): the
// artifact's shared object is the host program; its kernels, embedded in it,
// run on one CUDA stream. On load the executable dlopen()s the object, fills
// its `kimi_rt_gpu` table (module loading, launches, device allocation),
// uploads every weight and stores the device addresses in
// `kimi_gpu_weights`. A call uploads the inputs, runs the entry, waits for
// the stream, checks the shim's status, downloads the outputs and returns
// every device buffer the entry allocated to the allocator's cache.
//
// Device memory comes from a caching allocator (buffers are reused in
// stream order, so the host never waits for a free). Calls are serialised:
// the shared object holds one status word.
//
// States and caches a Session carries stay on the device (runCarried with
// `keep`): an output that stays becomes a carried tensor owning its block,
// which returns to the allocator when the last tensor on it is gone; cache
// rows are appended device to device (appendRows).
//
// Decode graphs: an entry with a cache_length input whose caches may be
// read padded is captured as a CUDA graph when a (padded length, cache
// addresses) key comes a second time in a row, and replayed after that
// (docs/runtime-abi.md, "Decode graphs"). The graph owns its
// temporaries and copies of the other inputs; the outputs are copied out,
// except states the caller donated: those the graph reads where they are
// and writes over at its end, so a replay moves no state through the host.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_GPU_MODEL_EXECUTABLE_H
#define KIMI_RUNTIME_CUDA_GPU_MODEL_EXECUTABLE_H

#include "runtime/cpu/comm_shim.h"
#include "runtime/cpu/cpu_module.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/session/executable.h"
#include "runtime/weights/weight_loader.h"

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

namespace kimi::rt {

class DeviceCarriedTensor;
struct GpuShim;
class SegmentCopy;

class GpuModelExecutable final
    : public Executable,
      public std::enable_shared_from_this<GpuModelExecutable> {
public:
  /// `artifact` must be a model for target "sm_90a"; `device` the CUDA
  /// ordinal. A partitioned artifact needs `comm`, a communicator over
  /// device buffers of `device` (NCCL) with one rank per artifact rank;
  /// it must outlive the executable.
  static StatusOr<std::shared_ptr<GpuModelExecutable>>
  create(std::shared_ptr<const ArtifactSpec> artifact,
         const WeightLoader &weights, int device = 0,
         Communicator *comm = nullptr);
  /// The same with every weight generated on the device: randomWeight()'s
  /// values for `seed` at the stored types, bit for bit what
  /// writeRandomWeights() and a WeightLoader would give (f32 and bf16
  /// weights; one rank). For shapes whose weights no host file holds.
  static StatusOr<std::shared_ptr<GpuModelExecutable>>
  createWithRandomWeights(std::shared_ptr<const ArtifactSpec> artifact,
                          uint64_t seed, int device = 0);
  ~GpuModelExecutable() override;

  const ArtifactSpec &artifact() const override { return *artifact_; }
  Status run(const std::string &entry,
             const std::vector<const HostTensor *> &inputs, int64_t tokens,
             std::vector<HostTensor> &outputs) const override;
  Status runCarried(const std::string &entry,
                    const std::vector<const CarriedTensor *> &inputs,
                    int64_t tokens, const std::vector<bool> &keep,
                    const std::vector<bool> &donated,
                    std::vector<CarriedRef> &outputs) const override;
  const void *residence() const override { return this; }
  StatusOr<CarriedRef> carry(const HostTensor &t) const override;
  StatusOr<CarriedRef>
  carryZeros(DType dtype, const std::vector<int64_t> &shape) const override;
  StatusOr<CarriedRef> appendRows(const CarriedRef &cache,
                                  const CarriedRef &rows,
                                  int64_t batch) const override;
  int64_t weightBytes() const override { return weightBytes_; }
  double weightLoadSeconds() const override { return weightSeconds_; }
  /// Device memory the weight uploads took, by the driver's free memory
  /// before and after them (-1 when the driver could not say).
  int64_t weightDeviceBytes() const { return weightDeviceBytes_; }
  /// Device memory in use now by the driver's count (total - free: every
  /// process and context on the device, this one's weights, cached blocks
  /// and graph pools included), or -1 when the driver cannot say.
  int64_t deviceBytesInUse() const;
  std::string deviceName() const override { return device_->describe(); }

  /// Tests: fill every buffer the model allocates with NaN before use, so
  /// an element the code forgets to write shows up in the outputs.
  void setPoison(bool poison);

  /// Kernel profile: with it on (or KIMI_GPU_PROFILE=1 in the environment
  /// when the executable is created), every launch and matrix product is
  /// bracketed by CUDA events and its device time summed by kernel name.
  void setProfiling(bool on) override;
  /// The profile so far: one line per kernel (calls, total and mean device
  /// time, the last launch shape), the most expensive first, at most `top`
  /// lines, then the totals. Empty when profiling is off.
  std::string profileReport(size_t top = 40) const override;
  void clearProfile() override;
  CallTimes callTimes() const override;

  struct DeviceBlock;  // one retained allocation of carried tensors
  struct CapturedCall; // an entry call captured as a CUDA graph

  /// Decode graphs (on unless KIMI_GPU_GRAPHS=0 when the executable is
  /// created): cache views are padded to multiples of `bucketRows`
  /// (KIMI_GPU_GRAPH_BUCKET, default 256) and at most `maxGraphs` graphs are
  /// kept (KIMI_GPU_GRAPHS_KEPT, default 4; the least recently used goes).
  void setGraphs(bool on, int64_t bucketRows = 256, size_t maxGraphs = 4);
  /// Why the last capture failed (empty when none did); that entry then
  /// runs directly.
  std::string graphFailure() const;

private:
  static StatusOr<std::shared_ptr<GpuModelExecutable>>
  createImpl(std::shared_ptr<const ArtifactSpec> artifact,
             const WeightLoader *weights, const uint64_t *randomSeed,
             int device, Communicator *comm);
  /// Every weight in a device buffer, its address in the module's
  /// kimi_gpu_weights table: from `weights`, or generated on the device for
  /// `randomSeed`.
  Status uploadWeights(const WeightLoader *weights, const uint64_t *randomSeed,
                       int32_t rank);
  friend class DeviceCarriedTensor;
  GpuModelExecutable() = default;
  /// A retained block of at least `bytes` (mutex_ held).
  StatusOr<std::shared_ptr<DeviceBlock>> allocateBlock(size_t bytes) const;
  // A direct call, with mutex_ held.
  struct DirectCall; // its device buffers and argument descriptors
  /// The inputs where the entry reads them: carried ones in place, host
  /// ones uploaded into buffers of the call.
  Status stageInputs(const EntrySpec &entry, const std::string &label,
                     const std::vector<const CarriedTensor *> &inputs,
                     DirectCall &call) const;
  /// The entry's results as carried tensors: kept ones on the device (in
  /// the block the entry returned, or a copy), the rest downloaded.
  Status takeOutputs(const EntrySpec &entry, const std::string &label,
                     int64_t tokens, const std::vector<bool> &keep,
                     DirectCall &call, std::vector<CarriedRef> &out) const;

  // Decode graphs (decode_graphs.cpp), every one with mutex_ held.
  struct GraphCall; // a call's graph key and the inputs it reads in place
  /// runCarried as a replay of a captured graph; false (nothing done) when
  /// this call cannot be one.
  StatusOr<bool> runAsGraph(const EntrySpec &entry, void *function,
                            const std::vector<const CarriedTensor *> &inputs,
                            int64_t tokens, const std::vector<bool> &keep,
                            const std::vector<bool> &donated,
                            std::vector<CarriedRef> &outputs) const;
  /// The call's key, or nothing when it cannot be a graph.
  std::optional<GraphCall> graphCallOf(
      const EntrySpec &entry, const std::vector<const CarriedTensor *> &inputs,
      const std::vector<bool> &keep, const std::vector<bool> &donated) const;
  /// Out of captured_: the graph `call` may replace, if any.
  std::unique_ptr<CapturedCall>
  takeReplaceableGraph(const GraphCall &call) const;
  /// Captures the call at the front of captured_; false (the entry then
  /// runs directly for good) when it cannot be captured.
  StatusOr<bool> captureGraph(const EntrySpec &entry, void *function,
                              const GraphCall &call,
                              const std::vector<const CarriedTensor *> &inputs,
                              int64_t tokens) const;
  Status replayGraph(CapturedCall &call, const EntrySpec &entry,
                     const std::vector<const CarriedTensor *> &inputs,
                     const std::vector<bool> &keep, bool statesInPlace,
                     std::vector<CarriedRef> &outputs) const;
  /// Bytes at `address` in a host tensor (waits for the stream); with
  /// `rowPitch`, a cache whose sequences lie rowPitch rows apart.
  StatusOr<HostTensor> download(cuda::CUdeviceptr address, DType dtype,
                                const std::vector<int64_t> &shape,
                                int64_t rowPitch = 0) const;

  std::shared_ptr<const ArtifactSpec> artifact_;
  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<CublasLt> blas_;
  std::unique_ptr<GpuShim> shim_;
  std::unique_ptr<CpuModule> module_;
  std::unique_ptr<CommShim> comm_;
  std::vector<DeviceBuffer> weights_;
  std::map<std::string, void *> entries_;
  int32_t *status_ = nullptr;
  int64_t weightBytes_ = 0;
  double weightSeconds_ = 0;
  int64_t weightDeviceBytes_ = -1;
  mutable std::mutex mutex_;
  bool graphs_ = true;
  int64_t graphBucket_ = 256;
  /// Every entry that reads caches takes cache_length (--cache-lengths), so
  /// it may read them padded: several sequences' caches then grow in place
  /// with their sequences a bucket of rows apart, and their decode steps
  /// replay as graphs too.
  bool paddedCaches_ = true;
  /// Donated states are updated in place by graph replays (unless
  /// KIMI_GPU_STATES_IN_PLACE=0 when the executable is created).
  bool statesInPlace_ = true;
  /// The kernel that copies a replay's states back (loaded at the first
  /// capture that needs it); KIMI_GPU_STATE_COPY_KERNEL=0 copies each
  /// state with a memcpy node instead.
  bool stateCopyKernel_ = true;
  mutable std::unique_ptr<SegmentCopy> segmentCopy_;
  size_t maxGraphs_ = 4;
  static constexpr size_t kNoOutput = ~size_t(0);
  /// By entry: for each input, the state output it becomes (kNoOutput when
  /// it is not a state).
  std::map<std::string, std::vector<size_t>> stateOutputs_;
  mutable std::map<std::string, int64_t> directCalls_; // by entry
  /// By entry: the key of its last call that found no graph (captured when
  /// the next call has it too).
  mutable std::map<std::string, std::string> lastKey_;
  mutable std::set<std::string> uncapturable_; // entries
  mutable std::string graphFailure_;
  // Last: the graphs go before the stream and device they use.
  mutable std::list<std::unique_ptr<CapturedCall>>
      captured_; // most recent first
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_GPU_MODEL_EXECUTABLE_H
