//===- cpu_executable.cpp - A CPU artifact ready to run -------------------===//

#include "runtime/cpu/cpu_executable.h"
#include "runtime/abi/kimi_module_abi.h"
#include "runtime/artifact/validate.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/entry_call.h"
#include "runtime/cpu/memref.h"
#include "runtime/support/text.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kimi::rt {

StatusOr<std::shared_ptr<CpuExecutable>>
CpuExecutable::create(std::shared_ptr<const ArtifactSpec> artifact,
                      const WeightLoader &weights, Communicator *comm) {
  if (!artifact)
    return invalidArgument("CPU executable: null artifact");
  const ArtifactSpec &a = *artifact;
  KIMI_RETURN_IF_ERROR(validateArtifact(a));
  if (a.target.kind != TargetKind::kCpu)
    return invalidArtifact("artifact target " + quoted(a.target.name()) +
                           " is not supported by the CPU runtime");
  const int32_t ranks = a.target.numRanks;
  const int32_t commSize = comm ? comm->size() : 1;
  if (ranks != commSize)
    return invalidArgument(
        "the artifact is partitioned over " + std::to_string(ranks) +
        " ranks but runs on " + std::to_string(commSize) +
        (ranks > 1 && !comm ? " (no communicator; run it under mpirun -np " +
                                  std::to_string(ranks) + ")"
                            : ""));
  const int32_t rank = comm ? comm->rank() : 0;
  if (a.kernels.size() != 1)
    return invalidArtifact("the CPU runtime expects one shared object, artifact "
                           "has " + std::to_string(a.kernels.size()) + " kernels");

  std::shared_ptr<CpuExecutable> exe(new CpuExecutable());
  exe->artifact_ = artifact;
  const KernelImage &kernel = a.kernels[0];
  KIMI_ASSIGN_OR_RETURN(exe->module_,
                        CpuModule::load(kernel.image,
                                        kernel.name.empty() ? "kernel 0" : kernel.name));

  // A partitioned model without collectives (data parallelism alone) has
  // no comm shim: its ranks never talk.
  if (ranks > 1 && exe->module_->symbol(KIMI_COMM_ABI_VERSION_SYMBOL).isOk()) {
    StatusOr<std::unique_ptr<CommShim>> shim =
        CommShim::install(*exe->module_, *comm, a.target.grid());
    if (!shim.isOk()) {
      Status s = shim.takeStatus();
      return s.addContext("partitioned model");
    }
    exe->comm_ = std::move(shim.value());
  }

  for (const EntrySpec &e : a.entries) {
    StatusOr<void *> fn = exe->module_->symbol(e.symbol);
    if (!fn.isOk()) {
      Status s = fn.takeStatus();
      return s.addContext("entry " + quoted(e.name));
    }
    exe->entries_[e.name] = fn.value();
  }

  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const WeightSpec &w = a.weights[i];
    const std::string where = "weight " + std::to_string(i) + " " + quoted(w.name);
    StatusOr<void *> address = exe->module_->symbol(w.symbol);
    if (!address.isOk()) {
      Status s = address.takeStatus();
      return s.addContext(where);
    }
    const int64_t bytes = storedBytes(w.dtype, w.blockNumel());
    const int64_t symbolBytes = exe->module_->symbolSize(address.value());
    if (symbolBytes >= 0 && symbolBytes != bytes)
      return moduleError(where + ": symbol " + quoted(w.symbol) + " holds " +
                         std::to_string(symbolBytes) + " bytes but " +
                         dtypeName(w.dtype) + " " + shapeToString(w.shape) +
                         (w.shardParts > 1
                              ? " in " + std::to_string(w.shardParts) +
                                    " blocks along dim " +
                                    std::to_string(w.shardDim)
                              : std::string()) +
                         " needs " + std::to_string(bytes));
    KIMI_RETURN_IF_ERROR(weights.loadBlock(w, rank, address.value(),
                                           static_cast<size_t>(bytes)));
    const uint8_t *p = static_cast<const uint8_t *>(address.value());
    exe->weightRanges_.push_back({p, p + bytes});
    exe->weightBytes_ += bytes;
  }
  exe->weightSeconds_ = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  std::sort(exe->weightRanges_.begin(), exe->weightRanges_.end(),
            [](const Range &x, const Range &y) { return x.begin < y.begin; });
  return exe;
}

bool CpuExecutable::insideWeights(const void *p) const {
  const uint8_t *q = static_cast<const uint8_t *>(p);
  auto it = std::upper_bound(
      weightRanges_.begin(), weightRanges_.end(), q,
      [](const uint8_t *v, const Range &r) { return v < r.begin; });
  if (it == weightRanges_.begin())
    return false;
  --it;
  return q >= it->begin && q < it->end;
}

Status CpuExecutable::run(const std::string &entryName,
                          const std::vector<const HostTensor *> &inputs,
                          int64_t tokens, std::vector<HostTensor> &outputs) const {
  KIMI_ASSIGN_OR_RETURN(const EntrySpec *entry,
                        entryForCall(*artifact_, entryName, inputs.size()));
  auto fn = entries_.find(entryName); // every entry was resolved at load
  const std::string label = "entry " + quoted(entryName);

  // Inputs.
  MemRefStruct args(ranksOf(entry->inputs));
  std::vector<void *> argPointers;
  std::vector<Range> inputRanges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec &spec = entry->inputs[i];
    const HostTensor *t = inputs[i];
    const std::string where = label + ": input " + std::to_string(i) + " " +
                              quoted(spec.name);
    KIMI_RETURN_IF_ERROR(checkEntryInput(spec, t, where));
    args.setContiguous(i, t->data(), t->shape);
    argPointers.push_back(args.pointer(i));
    inputRanges.push_back({t->data(), t->data() + t->bytes()});
  }

  // Call.
  MemRefStruct results(ranksOf(entry->outputs));
  KIMI_RETURN_IF_ERROR(callEntry(fn->second, results.structPointer(), argPointers));
  // A failed collective: the outputs below are released, not returned.
  Status collectives =
      comm_ ? comm_->takeStatus().addContext(label) : Status::ok();

  // Outputs: check, adopt or copy; release everything exactly once.
  auto foreign = [&](const void *p) {
    const uint8_t *q = static_cast<const uint8_t *>(p);
    for (const Range &r : inputRanges)
      if (q >= r.begin && q < r.end)
        return true;
    return insideWeights(p);
  };
  std::map<void *, std::shared_ptr<void>> owners;
  for (size_t i = 0; i < entry->outputs.size(); ++i) {
    MemRefView v = results.view(i);
    if (v.allocated() && !foreign(v.allocated()) && !foreign(v.aligned()) &&
        !owners.count(v.allocated()))
      owners[v.allocated()] = HostBuffer::adoptMalloc(v.allocated());
  }

  Status status;
  std::vector<HostTensor> out(entry->outputs.size());
  for (size_t i = 0; i < entry->outputs.size() && status.isOk(); ++i) {
    const TensorSpec &spec = entry->outputs[i];
    const std::string where = label + ": output " + std::to_string(i) + " " +
                              quoted(spec.name);
    MemRefView v = results.view(i);
    const std::vector<int64_t> expected = callShape(spec, tokens);
    std::vector<int64_t> got = v.sizes();
    if (got != expected) {
      status = executionError(where + ": returned shape " + shapeToString(got) +
                              ", expected " + shapeToString(expected));
      break;
    }
    int64_t numel = 0;
    checkedNumel(expected, numel);
    const size_t elem = dtypeSize(spec.dtype);
    const size_t bytes = static_cast<size_t>(numel) * elem;
    if (numel > 0 && !v.aligned()) {
      status = executionError(where + ": returned a null buffer");
      break;
    }
    if (v.offset() < 0) {
      status = executionError(where + ": negative offset " +
                              std::to_string(v.offset()));
      break;
    }
    HostTensor &t = out[i];
    t.dtype = spec.dtype;
    t.shape = expected;
    auto owner = owners.find(v.allocated());
    if (owner != owners.end() && v.isContiguous()) {
      t.buffer.owner = owner->second;
      t.buffer.data = static_cast<uint8_t *>(v.aligned()) +
                      v.offset() * static_cast<int64_t>(elem);
      t.buffer.size = bytes;
      continue;
    }
    StatusOr<HostBuffer> copy = HostBuffer::allocate(bytes);
    if (!copy.isOk()) {
      status = copy.takeStatus();
      break;
    }
    if (numel > 0)
      copyStrided(v, elem, copy->data);
    t.buffer = std::move(copy.value());
  }
  if (status.isOk())
    status = collectives;
  if (!status.isOk())
    return status; // `owners` releases every output allocation
  outputs = std::move(out);
  return Status::ok();
}

} // namespace kimi::rt
