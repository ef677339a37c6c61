//===- writer.cpp - Builds a kimi artifact file ---------------------------===//

#include "runtime/artifact/writer.h"
#include "runtime/artifact/checksum.h"
#include "runtime/artifact/validate.h"
#include "runtime/artifact/artifact_generated.h"

#include <cstring>


namespace kimi::rt {
namespace fb = ::kimi::artifact::fb;

namespace {

flatbuffers::Offset<fb::TensorSpec>
writeSpec(flatbuffers::FlatBufferBuilder &b, const TensorSpec &s) {
  return fb::CreateTensorSpec(b, b.CreateString(s.name),
                              static_cast<fb::TensorRole>(s.role),
                              static_cast<fb::DType>(s.dtype),
                              b.CreateVector(s.shape));
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::TensorSpec>>>
writeSpecs(flatbuffers::FlatBufferBuilder &b, const std::vector<TensorSpec> &specs) {
  std::vector<flatbuffers::Offset<fb::TensorSpec>> out;
  out.reserve(specs.size());
  for (const TensorSpec &s : specs)
    out.push_back(writeSpec(b, s));
  return b.CreateVector(out);
}

} // namespace

std::vector<uint8_t> serializeArtifact(const ArtifactSpec &a) {
  flatbuffers::FlatBufferBuilder b(1024);

  const ModelInfo &m = a.model;
  auto model = fb::CreateModelInfo(
      b, b.CreateString(m.modelType), m.vocabSize, m.hiddenSize, m.numLayers,
      b.CreateString(m.layerKinds), m.maxPositions, b.CreateString(m.configJson),
      m.configJson.empty() ? 0 : contentDigest(m.configJson.data(), m.configJson.size()));
  auto target = fb::CreateTarget(
      b, a.target.numRanks,
      a.target.gridShape.empty() ? 0 : b.CreateVector(a.target.gridShape),
      a.target.dataParallel, static_cast<fb::TargetKind>(a.target.kind));

  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  for (const KernelImage &k : a.kernels) {
    auto name = b.CreateString(k.name);
    // Align the image to 16 bytes in the buffer (harmless, and lets a future
    // reader map an image in place).
    b.ForceVectorAlignment(k.image.size(), sizeof(uint8_t), 16);
    auto image = b.CreateVector(k.image);
    kernels.push_back(
        fb::CreateKernel(b, name, static_cast<fb::KernelKind>(k.kind), image,
                         k.waitsGridDependencies,
                         contentDigest(k.image.data(), k.image.size())));
  }
  auto kernelsVec = b.CreateVector(kernels);

  std::vector<flatbuffers::Offset<fb::Entry>> entries;
  for (const EntrySpec &e : a.entries) {
    auto name = b.CreateString(e.name);
    auto symbol = b.CreateString(e.symbol);
    auto inputs = writeSpecs(b, e.inputs);
    auto outputs = writeSpecs(b, e.outputs);
    std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
    for (const BufferSpec &bs : e.buffers) {
      auto bname = b.CreateString(bs.name);
      auto shape = b.CreateVector(bs.shape);
      flatbuffers::Offset<flatbuffers::Vector<uint8_t>> data;
      if (!bs.data.empty())
        data = b.CreateVector(bs.data);
      buffers.push_back(fb::CreateBuffer(b, bname, static_cast<fb::BufferKind>(bs.kind),
                                         static_cast<fb::DType>(bs.dtype), shape,
                                         data));
    }
    std::vector<flatbuffers::Offset<fb::Launch>> launches;
    for (const LaunchSpec &l : e.launches) {
      auto fn = b.CreateString(l.function);
      auto grid = b.CreateVector(l.grid.data(), 3);
      auto block = b.CreateVector(l.block.data(), 3);
      auto args = b.CreateVector(l.args);
      launches.push_back(
          fb::CreateLaunch(b, l.kernel, fn, grid, block, l.sharedBytes, args));
    }
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Buffer>>> buffersVec;
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Launch>>> launchesVec;
    if (!buffers.empty())
      buffersVec = b.CreateVector(buffers);
    if (!launches.empty())
      launchesVec = b.CreateVector(launches);
    entries.push_back(fb::CreateEntry(b, name, symbol, e.kernel, inputs, outputs,
                                      buffersVec, launchesVec));
  }
  auto entriesVec = b.CreateVector(entries);

  std::vector<flatbuffers::Offset<fb::Weight>> weights;
  weights.reserve(a.weights.size());
  for (const WeightSpec &w : a.weights) {
    auto name = b.CreateString(w.name);
    auto aliases = b.CreateVectorOfStrings(w.aliases);
    auto shape = b.CreateVector(w.shape);
    auto symbol = b.CreateString(w.symbol);
    weights.push_back(fb::CreateWeight(b, name, aliases, shape,
                                       static_cast<fb::DType>(w.dtype), symbol,
                                       w.shardDim, w.shardParts,
                                       w.paddedForms));
  }
  auto weightsVec = b.CreateVector(weights);

  auto compiler = a.compiler.empty() ? 0 : b.CreateString(a.compiler);
  auto root = fb::CreateArtifact(b, a.formatVersion, model, target, kernelsVec,
                                 entriesVec, weightsVec, compiler);
  fb::FinishSizePrefixedArtifactBuffer(b, root);
  std::vector<uint8_t> bytes(b.GetBufferPointer(),
                             b.GetBufferPointer() + b.GetSize());
  // The trailer: the magic and the digest of everything before it.
  const uint64_t digest = contentDigest(bytes.data(), bytes.size());
  bytes.insert(bytes.end(), kArtifactTrailerMagic, kArtifactTrailerMagic + 8);
  for (int i = 0; i < 8; ++i)
    bytes.push_back(static_cast<uint8_t>(digest >> (8 * i)));
  return bytes;
}

uint32_t ArtifactWriter::addKernel(KernelKind kind, std::string name,
                                   std::vector<uint8_t> image) {
  spec_.kernels.push_back({std::move(name), kind, std::move(image), false});
  return static_cast<uint32_t>(spec_.kernels.size() - 1);
}

StatusOr<std::vector<uint8_t>> ArtifactWriter::finish() const {
  Status s = validateArtifact(spec_);
  if (!s.isOk())
    return s.addContext("artifact writer");
  // FlatBuffers buffers are limited to 2 GiB.
  uint64_t kernelBytes = 0;
  for (const KernelImage &k : spec_.kernels)
    kernelBytes += k.image.size();
  if (kernelBytes >= (uint64_t(1) << 31) - (uint64_t(1) << 26))
    return invalidArtifact("artifact writer: kernel images of " +
                           std::to_string(kernelBytes) +
                           " bytes exceed the 2 GiB FlatBuffers limit");
  return serializeArtifact(spec_);
}

Status ArtifactWriter::writeFile(const std::string &path) const {
  KIMI_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, finish());
  return writeBytesToFile(path, bytes);
}

} // namespace kimi::rt
