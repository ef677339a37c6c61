//===- CpuArtifact.cpp - the CPU artifact of a compiled model -------------===//

#include "lowering/ToProgram/CpuArtifact.h"
#include "dialects/Kimi/KimiOps.h"
#include "lowering/Passes.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "models/import/WeightNames.h"
#include "runtime/artifact/writer.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace kimi;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str().c_str());
}

llvm::Expected<rt::DType> dtypeOf(Type t) {
  if (t.isF32())
    return rt::DType::kF32;
  if (t.isInteger(32))
    return rt::DType::kI32;
  if (t.isBF16())
    return rt::DType::kBF16;
  if (isa<Float4E2M1FNType>(t))
    return rt::DType::kF4E2M1;
  if (isa<Float8E8M0FNUType>(t))
    return rt::DType::kF8E8M0;
  return error("the CPU artifact holds f32, bf16, MXFP4 (f4E2M1FN values, "
               "f8E8M0FNU scales) and i32 tensors only");
}

std::vector<int64_t> shapeOf(RankedTensorType t) {
  std::vector<int64_t> shape;
  for (int64_t d : t.getShape())
    shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
  return shape;
}

/// One argument or result of an entry. Logits and cache rows carry the
/// token count of the call in dimension 1, which the artifact marks dynamic;
/// `lastLogits` logits are one row per sequence whatever the count
/// (kimi-compile --prefill-logits=last).
llvm::Expected<rt::TensorSpec> specOf(Type type, StringAttr stateName,
                                      bool isInput, bool first,
                                      bool cacheLength = false,
                                      bool lastLogits = false) {
  auto t = cast<RankedTensorType>(type);
  llvm::Expected<rt::DType> dtype = dtypeOf(t.getElementType());
  if (!dtype)
    return dtype.takeError();
  rt::TensorSpec spec;
  spec.dtype = *dtype;
  spec.shape = shapeOf(t);
  if (first) {
    spec.name = isInput ? "tokens" : "logits";
    spec.role = isInput ? rt::TensorRole::kTokens : rt::TensorRole::kLogits;
    if (!isInput && !lastLogits)
      spec.shape[1] = -1;
    return spec;
  }
  if (cacheLength) {
    spec.name = "cache_length";
    spec.role = rt::TensorRole::kCacheLength;
    return spec;
  }
  if (!stateName)
    return error("an entry's state argument has no kimi.state name");
  spec.name = stateName.str();
  spec.role = stateName.getValue().ends_with("mla_cache")
                  ? rt::TensorRole::kCache
                  : rt::TensorRole::kState;
  if (spec.role == rt::TensorRole::kCache)
    spec.shape[1] = -1;
  return spec;
}

llvm::Expected<rt::EntrySpec> entryOf(func::FuncOp fn) {
  rt::EntrySpec entry;
  entry.name = fn.getSymName().str();
  entry.symbol = "kimi_entry_" + entry.name;
  FunctionType type = fn.getFunctionType();
  for (unsigned i = 0; i < type.getNumInputs(); ++i) {
    auto spec = specOf(type.getInput(i),
                       fn.getArgAttrOfType<StringAttr>(i, "kimi.state"),
                       /*isInput=*/true, i == 0,
                       fn.getArgAttr(i, "kimi.cache_length") != nullptr);
    if (!spec)
      return spec.takeError();
    entry.inputs.push_back(*spec);
  }
  // Logits of one row from calls of other token counts: the last token's.
  const bool lastLogits =
      type.getNumInputs() > 0 && type.getNumResults() > 0 &&
      cast<RankedTensorType>(type.getResult(0)).getDimSize(1) == 1 &&
      cast<RankedTensorType>(type.getInput(0)).getDimSize(1) != 1;
  for (unsigned i = 0; i < type.getNumResults(); ++i) {
    auto spec = specOf(type.getResult(i),
                       fn.getResultAttrOfType<StringAttr>(i, "kimi.state"),
                       /*isInput=*/false, i == 0, false, lastLogits);
    if (!spec)
      return spec.takeError();
    entry.outputs.push_back(*spec);
  }
  return entry;
}

} // namespace

llvm::Expected<rt::ArtifactSpec>
kimi::describeCpuArtifact(ModuleOp module, const ModelConfig &config,
                          llvm::StringRef configJson) {
  rt::ArtifactSpec spec;
  std::string kinds;
  for (AttentionKind kind : config.layers)
    kinds += kind == AttentionKind::Kda ? 'K' : 'M';
  spec.model = {config.modelType,
                config.vocab,
                config.hidden,
                static_cast<int32_t>(config.numLayers),
                kinds,
                config.maxPositions,
                configJson.str()};
  // A partitioned module (kimi-shard) runs one program per device.
  int32_t ranks = 1;
  spec.target.kind = rt::TargetKind::kCpu;
  for (auto grid : module.getOps<shard::GridOp>())
    for (int64_t n : grid.getShape()) {
      ranks *= static_cast<int32_t>(n);
      spec.target.gridShape.push_back(static_cast<int32_t>(n));
    }
  spec.target.numRanks = ranks;
  if (auto dp = module->getAttrOfType<IntegerAttr>("kimi.data_parallel"))
    spec.target.dataParallel = static_cast<int32_t>(dp.getInt());
  for (const char *name : {"prefill", "decode"}) {
    auto fn = module.lookupSymbol<func::FuncOp>(name);
    if (!fn)
      return error(llvm::Twine("the module has no @") + name);
    llvm::Expected<rt::EntrySpec> entry = entryOf(fn);
    if (!entry)
      return error(llvm::Twine("@") + name + ": " +
                   llvm::toString(entry.takeError()));
    spec.entries.push_back(*entry);
  }
  size_t slot = 0;
  for (auto weight : module.getOps<WeightOp>()) {
    auto type = cast<RankedTensorType>(weight.getType());
    llvm::Expected<rt::DType> dtype = dtypeOf(type.getElementType());
    if (!dtype)
      return error("weight @\"" + weight.getSymName() + "\": " +
                   llvm::toString(dtype.takeError()));
    rt::WeightSpec w{weight.getSymName().str(),
                     weightNameAliases(weight.getSymName()), shapeOf(type),
                     *dtype, weightGlobalName(slot++)};
    w.paddedForms = weightHasPaddedForms(weight.getSymName());
    // A partitioned weight: the manifest keeps the logical (checkpoint)
    // shape and says which block each rank holds.
    if (std::optional<ArrayRef<int64_t>> parts = weight.getParts())
      for (auto [d, p] : llvm::enumerate(*parts)) {
        if (p == 1)
          continue;
        if (w.shardDim >= 0)
          return error("weight @\"" + weight.getSymName() +
                       "\" is split along two dimensions; the runtime loads "
                       "blocks along one");
        w.shardDim = static_cast<int32_t>(d);
        w.shardParts = static_cast<int32_t>(p);
        w.shape[d] *= p;
      }
    spec.weights.push_back(std::move(w));
  }
  return spec;
}

llvm::Error kimi::writeCpuArtifact(rt::ArtifactSpec spec,
                                   llvm::StringRef sharedObject,
                                   llvm::StringRef path,
                                   bool waitsGridDependencies) {
  rt::ArtifactWriter writer(std::move(spec));
  uint32_t kernel = writer.addKernel(
      rt::KernelKind::kCpuSharedObject, "model.so",
      std::vector<uint8_t>(sharedObject.begin(), sharedObject.end()));
  writer.spec().kernels[kernel].waitsGridDependencies = waitsGridDependencies;
  for (rt::EntrySpec &entry : writer.spec().entries)
    entry.kernel = kernel;
  rt::Status status = writer.writeFile(path.str());
  if (!status.isOk())
    return error("writing the artifact: " + status.message());
  return llvm::Error::success();
}
