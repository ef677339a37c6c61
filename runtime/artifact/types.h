//===- types.h - Plain C++ model of a kimi artifact -------------*- C++ -*-===//
//
// What an artifact contains (docs/runtime-abi.md), as plain structs: the
// compiler fills them and hands them to `ArtifactWriter`; `ArtifactReader`
// returns them after verification. No dependencies.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_ARTIFACT_TYPES_H
#define KIMI_RUNTIME_ARTIFACT_TYPES_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kimi::rt {

/// The artifact format version this runtime writes and reads.
/// 2: Target.kind (an enum) instead of Target.name; no programs or memory
/// plan (artifact.fbs). 3: checksums (a trailer over the whole file, one
/// per kernel image), the config's digest and the compiler.
inline constexpr uint32_t kArtifactFormatVersion = 3;

/// Element types; values equal the schema's `DType` enum.
enum class DType : uint8_t {
  kInvalid = 0,
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kI32 = 4,
  kI64 = 5,
  kU8 = 6,
  kI8 = 7,
  kF8E8M0 = 8,
  kF4E2M1 = 9,
};
inline constexpr uint8_t kLastDType = 9;

/// kCacheLength: an input [B] (i32), the valid rows of each sequence's
/// caches; with it the caches may be passed padded past that length.
enum class TensorRole : uint8_t {
  kTokens = 0,
  kLogits = 1,
  kState = 2,
  kCache = 3,
  kCacheLength = 4,
};
inline constexpr uint8_t kLastTensorRole = 4;

enum class KernelKind : uint8_t { kCpuSharedObject = 0, kPtx = 1, kCubin = 2 };
inline constexpr uint8_t kLastKernelKind = 2;

/// What runs the artifact; values equal the schema's `TargetKind`.
enum class TargetKind : uint8_t { kInvalid = 0, kCpu = 1, kSm90a = 2 };
inline constexpr uint8_t kLastTargetKind = 2;
/// "cpu", "sm_90a"; "target(<n>)" for a value outside the enum.
std::string targetName(TargetKind kind);

/// "f32", "bf16", ...; "dtype(<n>)" for a value outside the enum.
std::string dtypeName(DType dtype);
/// Bytes per element; 0 for kInvalid, out-of-range values and sub-byte types.
size_t dtypeSize(DType dtype);
/// Bytes `numel` elements of `dtype` take as stored: f4e2m1 (MXFP4 values)
/// packs two a byte; every other type is numel x dtypeSize.
int64_t storedBytes(DType dtype, int64_t numel);
const char *roleName(TensorRole role);
const char *kernelKindName(KernelKind kind);

/// "[2, -1, 8]".
std::string shapeToString(const std::vector<int64_t> &shape);
/// Product of `shape` into `numel`; false when a dimension is negative or the
/// product exceeds 2^53 (no real tensor is that large).
bool checkedNumel(const std::vector<int64_t> &shape, int64_t &numel);

enum class BufferKind : uint8_t {
  kInput = 0,
  kOutput = 1,
  kInOut = 2,
  kTemporary = 3,
  kConstant = 4,
};
inline constexpr uint8_t kLastBufferKind = 4;
const char *bufferKindName(BufferKind kind);

/// A buffer of a GPU entry.
struct BufferSpec {
  std::string name;
  BufferKind kind = BufferKind::kTemporary;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; // constant buffers

  /// Bytes as stored (storedBytes: MXFP4 values two a byte); 0 if the shape
  /// is invalid.
  size_t bytes() const;
};

/// One kernel launch of a GPU entry.
struct LaunchSpec {
  uint32_t kernel = 0; // index into ArtifactSpec::kernels
  std::string function;
  std::array<uint32_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  uint32_t sharedBytes = 0;
  std::vector<uint32_t> args; // buffer indices
};

struct ModelInfo {
  std::string modelType;
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int32_t numLayers = 0;
  std::string layerKinds; // one letter per layer: 'K' or 'M'
  int64_t maxPositions = 0; // 0 = unknown / unlimited
  std::string configJson;
  /// XXH3-64 of configJson (0 when there is none): set by the writer.
  uint64_t configDigest = 0;
};

/// Grid axes a partitioned artifact may have (sub-communicators are made for
/// every subset of axes, 2^axes - 1 of them).
constexpr size_t kMaxGridAxes = 4;

struct TargetInfo {
  TargetKind kind = TargetKind::kCpu;
  int32_t numRanks = 1;
  /// The device grid, row-major; empty means {numRanks}. Collectives of a
  /// partitioned model run over groups of grid axes (docs/runtime-abi.md).
  std::vector<int32_t> gridShape;
  /// Groups of ranks the batch is split over (kimi-compile --strategy dp):
  /// rank r serves the sequences of group r / (numRanks / dataParallel).
  int32_t dataParallel = 1;

  /// The grid, with the one-axis default filled in.
  std::vector<int32_t> grid() const {
    return gridShape.empty() ? std::vector<int32_t>{numRanks} : gridShape;
  }
  /// The data-parallel group of `rank`.
  int32_t dataParallelGroup(int32_t rank) const {
    return rank / (numRanks / dataParallel);
  }
  /// "cpu" or "sm_90a", for messages and reports.
  std::string name() const { return targetName(kind); }
};

struct KernelImage {
  std::string name;
  KernelKind kind = KernelKind::kCpuSharedObject;
  std::vector<uint8_t> image;
  /// Every GPU kernel of the image (or launched by the shared object) begins
  /// with griddepcontrol.wait: it may be launched with programmatic
  /// dependent launch (kimi-gpu-grid-dependencies).
  bool waitsGridDependencies = false;
  /// XXH3-64 of `image`: set by the writer, checked by the reader.
  uint64_t checksum = 0;
};

struct TensorSpec {
  std::string name;
  TensorRole role = TensorRole::kState;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape; // -1 = dynamic
};

struct EntrySpec {
  std::string name;   // "prefill" / "decode"
  std::string symbol; // "kimi_entry_prefill"
  uint32_t kernel = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<BufferSpec> buffers;   // GPU entries
  std::vector<LaunchSpec> launches;  // GPU entries

  bool isGpuEntry() const { return !launches.empty(); }
  /// The buffer called `name`, or -1.
  int findBuffer(const std::string &name) const;
};

struct WeightSpec {
  std::string name; // canonical HF name, may contain "{e}"
  std::vector<std::string> aliases;
  std::vector<int64_t> shape; // logical shape
  DType dtype = DType::kF32;  // compute dtype
  std::string symbol;         // exported global in the shared object
  /// Partitioned artifacts: the global holds block `rank % shardParts` of
  /// `shardParts` equal blocks along `shardDim` (-1: the whole tensor).
  int32_t shardDim = -1;
  int32_t shardParts = 1;
  /// A 1-D weight a checkpoint may store padded: inside unit dimensions
  /// (Kimi Linear's `A_log` [1, 1, H, 1]) or longer with every element past
  /// the logical length zero (K3's `A_log` [128] for 96 heads).
  bool paddedForms = false;
  /// Elements of the block one rank holds.
  int64_t blockNumel() const;
};

/// What a session of an artifact holds besides its caches' rows: the sums
/// over the decode entry's state and cache signatures (sessionMemory).
struct SessionMemory {
  int64_t stateBytes = 0;         // the fixed-size states
  int64_t cacheBytesPerToken = 0; // every cache's row bytes, per token
};

struct ArtifactSpec {
  uint32_t formatVersion = kArtifactFormatVersion;
  ModelInfo model;
  TargetInfo target;
  std::vector<KernelImage> kernels;
  std::vector<EntrySpec> entries;
  std::vector<WeightSpec> weights;
  /// What wrote the artifact ("kimi-compile 0.1.0"); may be empty.
  std::string compiler;
  /// The XXH3-64 of the file's bytes before its trailer (set by the reader).
  uint64_t fileDigest = 0;

  /// The entry called `name`, or null.
  const EntrySpec *findEntry(const std::string &name) const;
  /// A library of GPU kernels (every entry is a GPU entry and there is no
  /// model): no prefill/decode session contract applies.
  bool isKernelLibrary() const;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_ARTIFACT_TYPES_H
