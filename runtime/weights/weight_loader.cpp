//===- weight_loader.cpp - Fills weight buffers from safetensors ----------===//

#include "runtime/weights/weight_loader.h"
#include "runtime/support/mapped_read.h"
#include "runtime/support/text.h"
#include "runtime/weights/checkpoint.h"
#include "runtime/weights/float_convert.h"
#include "runtime/weights/mxfp4.h"

#include <algorithm>
#include <cstring>

namespace kimi::rt {

namespace {

const char *kLanguageModelPrefix = "language_model.";

std::string substituteExpert(const std::string &pattern, int64_t expert) {
  std::string out = pattern;
  if (expert < 0)
    return out;
  const std::string key = "{e}";
  size_t at = 0;
  while ((at = out.find(key, at)) != std::string::npos) {
    std::string e = std::to_string(expert);
    out.replace(at, key.size(), e);
    at += e.size();
  }
  return out;
}

std::string listNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? ", " : "") + quoted(names[i]);
  return out;
}

/// Stores `n` floats as `dtype` (f32, bf16 or f16) at `out`.
void storeAs(const float *src, int64_t n, DType dtype, uint8_t *out) {
  switch (dtype) {
  case DType::kF32:
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
    return;
  case DType::kBF16:
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h = f32ToBf16(src[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  case DType::kF16:
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h = f32ToF16(src[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  default:
    return; // rejected by validateArtifact
  }
}

/// Widens `n` elements of a dense source to f32.
void widen(const uint8_t *src, StDType dtype, int64_t n, float *out) {
  switch (dtype) {
  case StDType::kF32:
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
    return;
  case StDType::kBF16:
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = bf16ToF32(h);
    }
    return;
  case StDType::kF16:
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = f16ToF32(h);
    }
    return;
  default:
    return;
  }
}

bool sameStorage(StDType src, DType dst) {
  return (src == StDType::kF32 && dst == DType::kF32) ||
         (src == StDType::kBF16 && dst == DType::kBF16) ||
         (src == StDType::kF16 && dst == DType::kF16);
}

/// Rows are converted in chunks of this many elements through a float buffer.
constexpr int64_t kChunk = 1 << 16;

/// The index of the first NaN or infinity among `n` dense elements
/// (f32, bf16 or f16) at `src`, or -1: all ones in the exponent.
int64_t firstNonFinite(const uint8_t *src, StDType dtype, int64_t n) {
  if (dtype == StDType::kF32) {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, src + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u)
        return i;
    }
    return -1;
  }
  const uint16_t exponent = dtype == StDType::kBF16 ? 0x7f80 : 0x7c00;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    if ((h & exponent) == exponent)
      return i;
  }
  return -1;
}

/// E8M0 byte 255 is NaN: a checkpoint holding it would poison every value
/// of its block, so it is refused, naming where it sits. `scales` holds
/// rows of `cols` blocks, the first of them row `firstRow`.
Status checkE8m0Scales(const uint8_t *scales, int64_t count, int64_t cols,
                       int64_t firstRow, const std::string &where) {
  for (int64_t i = 0; i < count; ++i)
    if (scales[i] == 0xFF)
      return invalidWeights(where + " holds the E8M0 NaN (255) at row " +
                            std::to_string(firstRow + i / cols) + ", block " +
                            std::to_string(i % cols) +
                            ": the values of that block have no scale");
  return Status::ok();
}

/// The error of a tensor whose file shrank while it was read.
Status truncatedWhileLoading(const std::string &where) {
  return ioError(where + " could not be read: the file is shorter than when "
                         "it was opened (truncated or replaced while loading)");
}

std::vector<int64_t> withoutUnitDims(const std::vector<int64_t> &shape) {
  std::vector<int64_t> out;
  for (int64_t d : shape)
    if (d != 1)
      out.push_back(d);
  return out;
}

} // namespace

std::vector<std::string> WeightLoader::spellings(const WeightSpec &spec,
                                                 int64_t expert) {
  std::vector<std::string> names;
  auto add = [&](const std::string &pattern) {
    std::string name = substituteExpert(pattern, expert);
    for (const std::string &candidate : {name, kLanguageModelPrefix + name}) {
      bool seen = false;
      for (const std::string &n : names)
        seen |= n == candidate;
      if (!seen)
        names.push_back(candidate);
    }
  };
  add(spec.name);
  for (const std::string &alias : spec.aliases)
    add(alias);
  return names;
}

StatusOr<std::unique_ptr<WeightLoader>>
WeightLoader::open(const std::vector<std::string> &paths) {
  KIMI_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<SafetensorsFile>> files,
                        openCheckpoint(paths));
  return fromFiles(std::move(files));
}

StatusOr<std::unique_ptr<WeightLoader>>
WeightLoader::fromFiles(std::vector<std::unique_ptr<SafetensorsFile>> files) {
  std::unique_ptr<WeightLoader> loader(new WeightLoader());
  loader->files_ = std::move(files);
  for (size_t f = 0; f < loader->files_.size(); ++f) {
    if (!loader->files_[f])
      return invalidArgument("weight loader: file " + std::to_string(f) +
                             " is null");
    for (const TensorView &t : loader->files_[f]->tensors()) {
      auto [it, inserted] = loader->index_.emplace(t.name, std::make_pair(f, &t));
      if (!inserted)
        return invalidWeights(
            "tensor " + quoted(t.name) + " is in both " +
            quoted(loader->files_[it->second.first]->path()) + " and " +
            quoted(loader->files_[f]->path()));
    }
  }
  return loader;
}

const TensorView *WeightLoader::find(const std::string &name,
                                     const SafetensorsFile **file) const {
  auto it = index_.find(name);
  if (it == index_.end())
    return nullptr;
  if (file)
    *file = files_[it->second.first].get();
  return it->second.second;
}

Status WeightLoader::loadPiece(const WeightSpec &spec,
                               const std::vector<std::string> &names,
                               const std::vector<int64_t> &shape, uint8_t *dst,
                               bool &found) const {
  found = false;
  const std::string weight = "weight " + quoted(spec.name);
  const int64_t width = shape.back();
  std::vector<int64_t> packedShape = shape;
  packedShape.back() = width / 2;
  std::vector<int64_t> scaleShape = shape;
  scaleShape.back() = width / kMxBlock;
  const bool mxCapable = width % kMxBlock == 0;

  for (const std::string &name : names) {
    const SafetensorsFile *file = nullptr;
    const TensorView *t = find(name, &file);
    std::string valueName = name;
    if (!t && mxCapable) { // compressed-tensors: `<name>_packed` + `<name>_scale`
      t = find(name + "_packed", &file);
      valueName = name + "_packed";
    }
    if (!t)
      continue;
    found = true;
    const std::string where = weight + ": tensor " + quoted(valueName) +
                              " in " + quoted(file->path());
    int64_t numel = 0;
    checkedNumel(shape, numel); // validated by the artifact reader

    // A weight the artifact holds as MXFP4: the checkpoint's bytes, as they
    // are (packed values; E8M0 scales, with the NaN byte refused).
    if (spec.dtype == DType::kF4E2M1) {
      if (t->dtype != StDType::kU8 || t->shape != packedShape)
        return invalidWeights(
            where + " is " + stDTypeName(t->dtype) + " " +
            shapeToString(t->shape) + "; the artifact holds this weight as "
            "MXFP4 and needs its packed U8 values " +
            shapeToString(packedShape) + " (a checkpoint with dense experts "
            "needs an artifact compiled with --mxfp4-experts=false)");
      if (!copyFromMapping(dst, t->data, static_cast<size_t>(numel / 2)))
        return truncatedWhileLoading(where);
      noteLoaded(*t);
      return Status::ok();
    }
    if (spec.dtype == DType::kF8E8M0) {
      if ((t->dtype != StDType::kU8 && t->dtype != StDType::kF8E8M0) ||
          t->shape != shape)
        return invalidWeights(where + " is " + stDTypeName(t->dtype) + " " +
                              shapeToString(t->shape) + "; the artifact "
                              "holds E8M0 scales " + shapeToString(shape) +
                              " (U8 or F8_E8M0)");
      if (!copyFromMapping(dst, t->data, static_cast<size_t>(numel)))
        return truncatedWhileLoading(where);
      KIMI_RETURN_IF_ERROR(checkE8m0Scales(dst, numel, shape.back(), 0, where));
      noteLoaded(*t);
      return Status::ok();
    }

    if (t->dtype == StDType::kF32 || t->dtype == StDType::kBF16 ||
        t->dtype == StDType::kF16) {
      // Stored as the logical shape or, for a weight with padded forms
      // (A_log), inside unit dimensions (Kimi Linear's [1, 1, H, 1] for [H])
      // or longer with zeros after the values (K3's [128] for 96 heads).
      // Either way the first numel elements in order are the weight.
      const std::vector<int64_t> stored = withoutUnitDims(t->shape);
      const bool padForm = spec.paddedForms && shape.size() == 1 &&
                           stored.size() == 1;
      const bool padded = padForm && stored[0] > shape[0];
      if (t->shape != shape && !(padForm && stored[0] >= shape[0]))
        return invalidWeights(where + " has shape " + shapeToString(t->shape) +
                              ", expected " + shapeToString(shape) +
                              (spec.paddedForms
                                   ? " (or a longer 1-D tensor padded with "
                                     "zeros)"
                                   : ""));
      const size_t srcSize = stDTypeSize(t->dtype);
      if (padded) {
        const int64_t total = stored[0];
        std::vector<uint8_t> raw(static_cast<size_t>(total - numel) * srcSize);
        if (!copyFromMapping(raw.data(), t->data + numel * static_cast<int64_t>(srcSize),
                             raw.size()))
          return truncatedWhileLoading(where);
        std::vector<float> tail(static_cast<size_t>(total - numel));
        widen(raw.data(), t->dtype, total - numel, tail.data());
        for (size_t i = 0; i < tail.size(); ++i)
          if (tail[i] != 0.0f)
            return invalidWeights(
                where + " has " + std::to_string(total) + " values for " +
                std::to_string(numel) + ": the values past " +
                std::to_string(numel) + " must be zero padding, but value " +
                std::to_string(numel + static_cast<int64_t>(i)) + " is " +
                std::to_string(tail[i]));
      }
      // NaN or infinity in a weight makes every logit NaN: refused, naming
      // the first one, unless the loader was told to allow them.
      auto checkFinite = [&](const uint8_t *values, int64_t n, int64_t first) {
        if (allowNonFinite_)
          return Status::ok();
        int64_t at = firstNonFinite(values, t->dtype, n);
        if (at < 0)
          return Status::ok();
        at += first;
        const int64_t cols = shape.back();
        float v = 0;
        widen(values + (at - first) * static_cast<int64_t>(srcSize), t->dtype, 1, &v);
        return invalidWeights(
            where + " holds " + (v != v ? "NaN" : v > 0 ? "+inf" : "-inf") +
            " at element " + std::to_string(at) + " (row " +
            std::to_string(at / cols) + ", column " + std::to_string(at % cols) +
            "): a non-finite weight makes the model's outputs NaN (kimi-run "
            "--allow-nonfinite loads it anyway)");
      };
      if (sameStorage(t->dtype, spec.dtype)) {
        if (!copyFromMapping(dst, t->data, static_cast<size_t>(numel) * srcSize))
          return truncatedWhileLoading(where);
        KIMI_RETURN_IF_ERROR(checkFinite(dst, numel, 0));
        noteLoaded(*t);
        return Status::ok();
      }
      const size_t chunk = static_cast<size_t>(std::min(numel, kChunk));
      std::vector<uint8_t> raw(chunk * srcSize);
      std::vector<float> buf(chunk);
      const size_t dstSize = dtypeSize(spec.dtype);
      for (int64_t i = 0; i < numel; i += kChunk) {
        int64_t n = std::min(kChunk, numel - i);
        if (!copyFromMapping(raw.data(), t->data + i * static_cast<int64_t>(srcSize),
                             static_cast<size_t>(n) * srcSize))
          return truncatedWhileLoading(where);
        KIMI_RETURN_IF_ERROR(checkFinite(raw.data(), n, i));
        widen(raw.data(), t->dtype, n, buf.data());
        storeAs(buf.data(), n, spec.dtype, dst + i * static_cast<int64_t>(dstSize));
      }
      noteLoaded(*t);
      return Status::ok();
    }

    if (t->dtype == StDType::kU8) {
      if (!mxCapable)
        return invalidWeights(where + " is U8 " + shapeToString(t->shape) +
                              "; MXFP4 needs a last dimension that is a "
                              "multiple of 32, the artifact expects " +
                              shapeToString(shape));
      if (t->shape != packedShape)
        return invalidWeights(where + " is U8 (MXFP4 values) with shape " +
                              shapeToString(t->shape) + ", expected " +
                              shapeToString(packedShape) + " for logical " +
                              shapeToString(shape));
      const std::string scaleName = name + "_scale";
      const SafetensorsFile *scaleFile = nullptr;
      const TensorView *s = find(scaleName, &scaleFile);
      if (!s)
        return invalidWeights(where + " is U8 (MXFP4 values) but its scale "
                              "tensor " + quoted(scaleName) + " is missing");
      const std::string scaleWhere = weight + ": scale tensor " +
                                     quoted(scaleName) + " in " +
                                     quoted(scaleFile->path());
      if (s->dtype != StDType::kU8 && s->dtype != StDType::kF8E8M0)
        return invalidWeights(scaleWhere + " has unsupported dtype " +
                              stDTypeName(s->dtype) +
                              " (expected U8 or F8_E8M0)");
      if (s->shape != scaleShape)
        return invalidWeights(scaleWhere + " has shape " +
                              shapeToString(s->shape) + ", expected " +
                              shapeToString(scaleShape));
      const int64_t rows = numel / width;
      const int64_t blocksPerRow = width / kMxBlock;
      // Rows in pieces of about 1 MiB of codes: copied out of the mapping,
      // their scales checked, then dequantised into the destination.
      const int64_t piece = std::max<int64_t>(1, (int64_t(1) << 20) / (width / 2));
      std::vector<uint8_t> codes(static_cast<size_t>(std::min(rows, piece) * (width / 2)));
      std::vector<uint8_t> scalesIn(static_cast<size_t>(std::min(rows, piece) * blocksPerRow));
      std::vector<float> values(spec.dtype == DType::kF32 ? 0 : static_cast<size_t>(width));
      const size_t dstSize = dtypeSize(spec.dtype);
      for (int64_t r0 = 0; r0 < rows; r0 += piece) {
        const int64_t n = std::min(piece, rows - r0);
        if (!copyFromMapping(codes.data(), t->data + r0 * (width / 2),
                             static_cast<size_t>(n * (width / 2))))
          return truncatedWhileLoading(where);
        if (!copyFromMapping(scalesIn.data(), s->data + r0 * blocksPerRow,
                             static_cast<size_t>(n * blocksPerRow)))
          return truncatedWhileLoading(scaleWhere);
        KIMI_RETURN_IF_ERROR(checkE8m0Scales(scalesIn.data(), n * blocksPerRow,
                                             blocksPerRow, r0, scaleWhere));
        uint8_t *out = dst + r0 * width * static_cast<int64_t>(dstSize);
        if (spec.dtype == DType::kF32) {
          dequantizeMxfp4(codes.data(), scalesIn.data(), n, width,
                          reinterpret_cast<float *>(out));
          continue;
        }
        for (int64_t r = 0; r < n; ++r) {
          dequantizeMxfp4(codes.data() + r * (width / 2),
                          scalesIn.data() + r * blocksPerRow, 1, width, values.data());
          storeAs(values.data(), width, spec.dtype,
                  out + r * width * static_cast<int64_t>(dstSize));
        }
      }
      noteLoaded(*t);
      noteLoaded(*s);
      return Status::ok();
    }

    return invalidWeights(where + " has unsupported dtype " +
                          stDTypeName(t->dtype) +
                          " (supported: F32, BF16, F16, and MXFP4 as U8 values "
                          "with U8/F8_E8M0 scales)");
  }
  return Status::ok();
}

void WeightLoader::noteLoaded(const TensorView &t) const {
  progress_.tensors += 1;
  progress_.bytes += t.nbytes;
  if (onProgress_)
    onProgress_(progress_);
}

WeightLoader::Progress WeightLoader::checkpointTotals() const {
  Progress total;
  for (const auto &[name, where] : index_) {
    if (isSkippedTensor(name))
      continue;
    total.tensors += 1;
    total.bytes += where.second->nbytes;
  }
  return total;
}

bool WeightLoader::isSkippedTensor(const std::string &name) {
  for (const char *prefix : {"vision_tower.", "mm_projector."})
    if (name.rfind(prefix, 0) == 0)
      return true;
  return false;
}

int64_t WeightLoader::skippedTensors() const {
  int64_t n = 0;
  for (const auto &entry : index_)
    n += isSkippedTensor(entry.first);
  return n;
}

Status WeightLoader::load(const WeightSpec &spec, void *dstVoid,
                          size_t dstBytes) const {
  const std::string weight = "weight " + quoted(spec.name);
  int64_t numel = 0;
  if (spec.shape.empty() || !checkedNumel(spec.shape, numel) || numel == 0)
    return invalidArgument(weight + ": invalid logical shape " +
                           shapeToString(spec.shape));
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kBF16 &&
      spec.dtype != DType::kF16 && spec.dtype != DType::kF4E2M1 &&
      spec.dtype != DType::kF8E8M0)
    return invalidArgument(weight + ": unsupported stored dtype " +
                           dtypeName(spec.dtype));
  if (spec.dtype == DType::kF4E2M1 && spec.shape.back() % 2)
    return invalidArgument(weight + ": f4e2m1 needs an even last dimension");
  const int64_t needed = storedBytes(spec.dtype, numel);
  if (static_cast<uint64_t>(needed) != dstBytes)
    return invalidArgument(weight + ": destination holds " +
                           std::to_string(dstBytes) + " bytes, " +
                           dtypeName(spec.dtype) + " " +
                           shapeToString(spec.shape) + " needs " +
                           std::to_string(needed));
  uint8_t *dst = static_cast<uint8_t *>(dstVoid);

  const bool stacked = spec.name.find("{e}") != std::string::npos;
  std::vector<std::string> names = spellings(spec);
  bool found = false;
  KIMI_RETURN_IF_ERROR(loadPiece(spec, names, spec.shape, dst, found));
  if (found)
    return Status::ok();
  const std::string files = std::to_string(files_.size()) + " safetensors file" +
                            (files_.size() == 1 ? "" : "s");
  if (!stacked)
    return invalidWeights(weight + " not found in " + files + "; tried " +
                          listNames(names));

  const int64_t experts = spec.shape[0];
  const std::vector<int64_t> pieceShape(spec.shape.begin() + 1, spec.shape.end());
  const int64_t pieceBytes = storedBytes(spec.dtype, numel / experts);
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<std::string> expertNames = spellings(spec, e);
    KIMI_RETURN_IF_ERROR(
        loadPiece(spec, expertNames, pieceShape, dst + e * pieceBytes, found));
    if (!found)
      return invalidWeights(
          weight + ": expert " + std::to_string(e) + " of " +
          std::to_string(experts) + " not found in " + files + "; tried " +
          listNames(expertNames) + " (and the stacked " + listNames(names) + ")");
  }
  return Status::ok();
}

Status WeightLoader::loadBlock(const WeightSpec &spec, int32_t rank,
                               void *dst, size_t dstBytes) const {
  if (spec.shardParts <= 1)
    return load(spec, dst, dstBytes);
  // Load the whole tensor, keep this rank's block (f4e2m1 is never split
  // along its packed last dimension: the artifact reader refuses that).
  if (dstBytes != static_cast<size_t>(storedBytes(spec.dtype, spec.blockNumel())))
    return invalidArgument("weight " + quoted(spec.name) + ": a block of " +
                           std::to_string(spec.blockNumel()) + " elements into " +
                           std::to_string(dstBytes) + " bytes");
  std::vector<uint8_t> whole(dstBytes * static_cast<size_t>(spec.shardParts));
  KIMI_RETURN_IF_ERROR(load(spec, whole.data(), whole.size()));
  const std::vector<int64_t> &shape = spec.shape;
  const int32_t dim = spec.shardDim;
  int64_t outer = 1, innerNumel = 1;
  for (int32_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    innerNumel *= shape[d];
  const int64_t inner = storedBytes(spec.dtype, innerNumel);
  const int64_t block = shape[dim] / spec.shardParts;
  const int64_t index = rank % spec.shardParts;
  auto *out = static_cast<uint8_t *>(dst);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out + o * block * inner,
                whole.data() + (o * shape[dim] + index * block) * inner,
                static_cast<size_t>(block * inner));
  return Status::ok();
}

} // namespace kimi::rt
