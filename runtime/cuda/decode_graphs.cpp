//===- decode_graphs.cpp - Entry calls replayed as CUDA graphs ------------===//
//
// GpuModelExecutable's decode graphs (docs/runtime-abi.md, "Decode graphs"):
// a call whose key (shapes, caches by address and padded rows, states taken
// in place by address) came a second time in a row is captured into a graph
// with its own memory pool, and later calls with that key replay it.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/entry_call.h"
#include "runtime/cpu/memref.h"
#include "runtime/cuda/captured_call.h"
#include "runtime/cuda/device_carried_tensor.h"
#include "runtime/cuda/gpu_shim.h"
#include "runtime/cuda/segment_copy.h"
#include "runtime/support/text.h"

#include <algorithm>
#include <chrono>

namespace kimi::rt {

struct GpuModelExecutable::GraphCall {
  /// Caches by address and padded rows, states taken in place by address,
  /// the other inputs by shape.
  std::string key;
  /// The key without addresses and cache paddings: a graph of the same
  /// signature may be replaced by this call's (its executable updated).
  std::string signature;
  /// The key less the addresses of states taken in place: a direct call
  /// leaves its new states in new blocks, so those addresses change at every
  /// step until a graph keeps them in place.
  std::string repeat;
  std::vector<std::vector<int64_t>> shapes;   // as the graph reads them
  std::vector<cuda::CUdeviceptr> byReference; // inputs read in place, or 0
  std::vector<std::shared_ptr<DeviceBlock>> referenced; // their blocks
  std::vector<size_t> inPlace; // inputs whose state output is written over them
};

namespace {
/// Output `i` as the call returned it in `results`: its place, or an error.
StatusOr<CapturedResult> capturedResult(const EntrySpec &entry,
                                        MemRefStruct &results, size_t i,
                                        int64_t tokens) {
  const TensorSpec &spec = entry.outputs[i];
  MemRefView v = results.view(i);
  const std::vector<int64_t> expected = callShape(spec, tokens);
  int64_t numel = 0;
  checkedNumel(expected, numel);
  if (v.sizes() != expected ||
      (numel > 0 && (!v.aligned() || !v.isContiguous() || v.offset() < 0)))
    return executionError("output " + std::to_string(i) + " " +
                          quoted(spec.name) + ": returned shape " +
                          shapeToString(v.sizes()) +
                          " (or a strided "
                          "buffer), expected " +
                          shapeToString(expected));
  const size_t elem = dtypeSize(spec.dtype);
  return CapturedResult{reinterpret_cast<cuda::CUdeviceptr>(v.aligned()) +
                            static_cast<cuda::CUdeviceptr>(v.offset()) * elem,
                        size_t(numel) * elem, expected};
}
} // namespace

std::optional<GpuModelExecutable::GraphCall> GpuModelExecutable::graphCallOf(
    const EntrySpec &entry, const std::vector<const CarriedTensor *> &inputs,
    const std::vector<bool> &keep, const std::vector<bool> &donated) const {
  bool lengths = false;
  for (const TensorSpec &s : entry.inputs)
    lengths |= s.role == TensorRole::kCacheLength;
  const std::vector<size_t> &stateOutput = stateOutputs_.at(entry.name);
  GraphCall c;
  c.key = entry.name + (shim_->profile.on ? "|profiled" : "");
  c.signature = c.repeat = c.key;
  c.shapes.resize(inputs.size());
  c.byReference.assign(inputs.size(), 0);
  c.referenced.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const CarriedTensor *t = inputs[i];
    if (!t || !checkEntryInput(entry.inputs[i], t, "").isOk() ||
        (t->residence() != this && !t->host()))
      return std::nullopt; // the direct path reports it
    std::vector<int64_t> &shape = c.shapes[i];
    shape = t->shape();
    const auto *dt = t->residence() == this
                         ? static_cast<const DeviceCarriedTensor *>(t)
                         : nullptr;
    if (entry.inputs[i].role != TensorRole::kCache) {
      c.key += "|" + shapeToString(shape);
      c.signature += "|" + shapeToString(shape);
      c.repeat += "|" + shapeToString(shape);
      // A donated state that nothing else views (the tensor alone holds its
      // block) is read where it is, and the graph ends by copying the new
      // state over it: a replay then copies no state in or out.
      if (dt && statesInPlace_ && stateOutput[i] != kNoOutput &&
          stateOutput[i] < keep.size() && keep[stateOutput[i]] &&
          i < donated.size() && donated[i] && dt->block().use_count() == 1 &&
          std::find(c.byReference.begin(), c.byReference.end(), dt->data()) ==
              c.byReference.end()) {
        c.byReference[i] = dt->data();
        c.referenced[i] = dt->block();
        c.inPlace.push_back(i);
        c.key += "@" + std::to_string(dt->data());
      }
      continue;
    }
    // A cache: one sequence in zeroed storage with room for the padding,
    // or several a bucket-multiple pitch apart (appendRows).
    if (!lengths || !dt || shape[1] < 1 || !dt->storage() ||
        !dt->storage()->zeroTail)
      return std::nullopt;
    int64_t padded = dt->rowPitch();
    if (shape[0] == 1 && !padded) {
      const int64_t rows = shape[1];
      const size_t rowBytes = t->bytes() / size_t(rows);
      padded = (rows + graphBucket_ - 1) / graphBucket_ * graphBucket_;
      if (size_t(padded) * rowBytes > dt->storage()->capacity)
        return std::nullopt;
    }
    if (!padded)
      return std::nullopt;
    shape[1] = padded;
    c.byReference[i] = dt->data();
    c.referenced[i] = dt->block();
    const std::string place =
        "|" + std::to_string(dt->data()) + "x" + std::to_string(padded);
    c.key += place;
    c.repeat += place;
    c.signature += "|cache";
  }
  return c;
}

std::unique_ptr<GpuModelExecutable::CapturedCall>
GpuModelExecutable::takeReplaceableGraph(const GraphCall &call) const {
  // A graph of the same signature whose caches and states are gone or are
  // this call's (the sequence's previous bucket, or a sequence since
  // dropped): the least recently used such graph.
  auto replaceable = [&](const CapturedCall &c) {
    if (c.signature != call.signature)
      return false;
    for (size_t i = 0; i < c.inPlaceBlocks.size(); ++i) {
      std::shared_ptr<DeviceBlock> b = c.inPlaceBlocks[i].lock();
      if (b && b != call.referenced[i])
        return false;
    }
    return true;
  };
  auto victim = std::find_if(captured_.rbegin(), captured_.rend(),
                             [&](const auto &c) { return replaceable(*c); });
  if (victim == captured_.rend())
    return nullptr;
  std::unique_ptr<CapturedCall> replaced = std::move(*victim);
  captured_.erase(std::next(victim).base());
  return replaced;
}

StatusOr<bool> GpuModelExecutable::captureGraph(
    const EntrySpec &entry, void *function, const GraphCall &c,
    const std::vector<const CarriedTensor *> &inputs, int64_t tokens) const {
  const CudaDriver &d = device_->driver();
  KernelProfile &profile = shim_->profile;
  const std::vector<size_t> &stateOutput = stateOutputs_.at(entry.name);
  // A replaced graph gives its memory to the capture and, when the kernels
  // are the same, its executable is updated instead of a new one made.
  std::unique_ptr<CapturedCall> replaced = takeReplaceableGraph(c);
  auto call = std::make_unique<CapturedCall>();
  call->key = c.key;
  call->signature = c.signature;
  call->inPlaceBlocks.assign(c.referenced.begin(), c.referenced.end());
  if (replaced) {
    // Nothing of the replaced graph runs again: all its memory is free,
    // and the same allocations find the same blocks.
    call->pool = std::move(replaced->pool);
    call->pool->releaseAll();
    call->pool->markReuse();
  } else {
    call->pool = std::make_unique<DeviceAllocator>(*device_);
  }
  call->pool->setPoison(allocator_->poison());
  MemRefStruct args(ranksOf(entry.inputs)), results(ranksOf(entry.outputs));
  std::vector<void *> argPointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    cuda::CUdeviceptr at = c.byReference[i];
    if (!at) {
      KIMI_ASSIGN_OR_RETURN(at, call->pool->allocate(inputs[i]->bytes()));
      call->staged.push_back({i, at, inputs[i]->bytes()});
    }
    args.setContiguous(i, reinterpret_cast<void *>(at), c.shapes[i]);
    argPointers.push_back(args.pointer(i));
  }
  // The states updated in place are copied back by one kernel launch
  // (SegmentCopy), from a table in the graph's memory written after the
  // capture, when the outputs' places are known.
  cuda::CUdeviceptr segmentTable = 0;
  if (!c.inPlace.empty() && stateCopyKernel_) {
    if (!segmentCopy_) {
      StatusOr<std::unique_ptr<SegmentCopy>> loaded =
          SegmentCopy::load(*device_);
      if (loaded.isOk())
        segmentCopy_ = std::move(loaded.value());
      else if (graphFailure_.empty()) // memcpy nodes then; say why
        graphFailure_ =
            "state copies as memcpy nodes: " + loaded.status().message();
    }
    if (segmentCopy_) {
      KIMI_ASSIGN_OR_RETURN(
          segmentTable,
          call->pool->allocate(c.inPlace.size() *
                               SegmentCopy::kTableBytesPerSegment));
    }
  }
  std::vector<SegmentCopy::Segment> segments;
  // Poison fills of the staged inputs come before the capture.
  KIMI_RETURN_IF_ERROR(stream_->synchronize());
  *status_ = 0;
  shim_->error = Status::ok();
  shim_->allocator = call->pool.get();
  shim_->capturing = true;
  // The profile's events of the captured call are the graph's own.
  std::swap(profile.events, call->events);
  std::swap(profile.pending, call->timed);
  const size_t used = std::exchange(profile.used, 0);
  profile.inGraph = true;
  StatusOr<std::unique_ptr<CudaGraph>> graph = CudaGraph::capture(
      *device_, *stream_,
      [&]() -> Status {
        KIMI_RETURN_IF_ERROR(
            callEntry(function, results.structPointer(), argPointers));
        // The states updated in place: copied over their inputs after
        // every kernel of the call has read them (stream order), in one
        // launch where the segments allow.
        size_t largest = 0;
        for (size_t i : c.inPlace) {
          KIMI_ASSIGN_OR_RETURN(
              CapturedCall::Result r,
              capturedResult(entry, results, stateOutput[i], tokens));
          SegmentCopy::Segment seg{c.byReference[i], r.at, r.bytes};
          if (!r.bytes || r.at == c.byReference[i])
            continue;
          if (segmentTable && SegmentCopy::fits(seg)) {
            segments.push_back(seg);
            largest = std::max(largest, seg.bytes);
            continue;
          }
          KIMI_RETURN_IF_ERROR(
              d.check(d.cuMemcpyDtoDAsync(c.byReference[i], r.at, r.bytes,
                                          stream_->handle()),
                      "cuMemcpyDtoDAsync (state in place)"));
        }
        if (!segments.empty())
          KIMI_RETURN_IF_ERROR(segmentCopy_->launch(
              *stream_, segmentTable, uint32_t(segments.size()), largest));
        return Status::ok();
      },
      /*relaxed=*/true, // the call allocates from the pool
      replaced ? replaced->graph.get() : nullptr);
  profile.inGraph = false;
  std::swap(profile.events, call->events);
  std::swap(profile.pending, call->timed);
  profile.used = used;
  shim_->capturing = false;
  shim_->allocator = allocator_.get();
  Status st = graph.status();
  if (st.isOk() && !shim_->error.isOk())
    st = shim_->error;
  if (st.isOk() && *status_ != 0)
    st = executionError("the model's GPU shim failed (status " +
                        std::to_string(*status_) + ")");
  for (size_t i = 0; i < entry.outputs.size() && st.isOk(); ++i) {
    StatusOr<CapturedCall::Result> r =
        capturedResult(entry, results, i, tokens);
    if (!r.isOk()) {
      st = r.takeStatus();
      break;
    }
    call->results.push_back(std::move(r.value()));
  }
  for (size_t i : c.inPlace)
    if (st.isOk())
      call->results[stateOutput[i]].inPlaceOf = i;
  if (st.isOk() && !segments.empty()) {
    std::vector<uint64_t> table = SegmentCopy::table(segments);
    st = d.check(d.cuMemcpyHtoD(segmentTable, table.data(),
                                table.size() * sizeof(uint64_t)),
                 "cuMemcpyHtoD (state copy table)");
  }
  *status_ = 0;
  shim_->error = Status::ok();
  if (!st.isOk()) {
    // This entry runs directly from now on; nothing of the call ran.
    uncapturable_.insert(entry.name);
    graphFailure_ = "entry " + quoted(entry.name) +
                    " is not captured as a graph: " + st.message();
    return false;
  }
  call->graph = std::move(graph.value());
  // Blocks of the replaced graph that this capture did not take (sizes
  // of its bucket only) go back to the driver.
  call->pool->trimUntouched();
  Executable::CallTimes &times = profile.times;
  times.graphCaptures += 1;
  times.graphUpdates += call->graph->updated() ? 1 : 0;
  times.graphCaptureMs += call->graph->captureMs();
  times.graphInstantiateMs += call->graph->instantiateMs();
  captured_.push_front(std::move(call));
  while (captured_.size() > maxGraphs_)
    captured_.pop_back();
  return true;
}

Status GpuModelExecutable::replayGraph(
    CapturedCall &call, const EntrySpec &entry,
    const std::vector<const CarriedTensor *> &inputs,
    const std::vector<bool> &keep, bool statesInPlace,
    std::vector<CarriedRef> &outputs) const {
  // The outputs' memory first (a failure there changes nothing), then the
  // inputs into the graph's copies, the graph, the outputs out.
  const CudaDriver &d = device_->driver();
  cuda::CUstream stream = stream_->handle();
  auto started = std::chrono::steady_clock::now();
  std::vector<CarriedRef> out(entry.outputs.size());
  std::vector<std::shared_ptr<DeviceBlock>> blocks(call.results.size());
  std::vector<HostBuffer> hosts(call.results.size());
  for (size_t i = 0; i < call.results.size(); ++i) {
    const CapturedCall::Result &r = call.results[i];
    if (r.inPlaceOf != CapturedResult::kNone)
      continue;
    if (i < keep.size() && keep[i]) {
      KIMI_ASSIGN_OR_RETURN(blocks[i], allocateBlock(r.bytes));
    } else {
      KIMI_ASSIGN_OR_RETURN(hosts[i], HostBuffer::allocate(r.bytes));
    }
  }
  for (const CapturedCall::Staged &s : call.staged) {
    if (!s.bytes)
      continue;
    const CarriedTensor *t = inputs[s.input];
    Status copied =
        t->residence() == this
            ? d.check(d.cuMemcpyDtoDAsync(
                          s.at,
                          static_cast<const DeviceCarriedTensor &>(*t).data(),
                          s.bytes, stream),
                      "cuMemcpyDtoDAsync (graph input)")
            : d.check(
                  d.cuMemcpyHtoDAsync(s.at, t->host()->data(), s.bytes, stream),
                  "cuMemcpyHtoDAsync (graph input)");
    KIMI_RETURN_IF_ERROR(copied);
  }
  KIMI_RETURN_IF_ERROR(call.graph->launch(*stream_));
  for (size_t i = 0; i < call.results.size(); ++i) {
    const CapturedCall::Result &r = call.results[i];
    if (r.inPlaceOf != CapturedResult::kNone) {
      const auto &in =
          static_cast<const DeviceCarriedTensor &>(*inputs[r.inPlaceOf]);
      out[i] = std::make_shared<DeviceCarriedTensor>(
          entry.outputs[i].dtype, r.shape, in.block(), in.data());
      continue;
    }
    if (!blocks[i])
      continue;
    if (r.bytes)
      KIMI_RETURN_IF_ERROR(
          d.check(d.cuMemcpyDtoDAsync(blocks[i]->base, r.at, r.bytes, stream),
                  "cuMemcpyDtoDAsync (graph output)"));
    const cuda::CUdeviceptr base = blocks[i]->base;
    std::shared_ptr<GrowableStorage> storage =
        growable(*blocks[i], base, r.bytes);
    out[i] = std::make_shared<DeviceCarriedTensor>(
        entry.outputs[i].dtype, r.shape, std::move(blocks[i]), base,
        std::move(storage));
  }
  auto issued = std::chrono::steady_clock::now();
  KIMI_RETURN_IF_ERROR(stream_->synchronize());
  for (size_t i = 0; i < call.results.size(); ++i) {
    if (out[i])
      continue;
    const CapturedCall::Result &r = call.results[i];
    if (r.bytes)
      KIMI_RETURN_IF_ERROR(d.check(d.cuMemcpyDtoH(hosts[i].data, r.at, r.bytes),
                                   "cuMemcpyDtoH (graph output)"));
    out[i] = std::make_shared<HostCarriedTensor>(
        HostTensor{entry.outputs[i].dtype, r.shape, std::move(hosts[i])});
  }
  using Ms = std::chrono::duration<double, std::milli>;
  KernelProfile &profile = shim_->profile;
  if (profile.on) {
    profile.add(call.events, call.timed);
    profile.entryMs += Ms(std::chrono::steady_clock::now() - started).count();
    profile.entryCalls += 1;
    profile.graphReplays += 1;
  }
  Executable::CallTimes &times = profile.times;
  times.calls += 1;
  times.graphReplays += 1;
  times.statesInPlace += statesInPlace ? 1 : 0;
  times.issueMs += Ms(issued - started).count();
  times.waitMs += Ms(std::chrono::steady_clock::now() - issued).count();
  outputs = std::move(out);
  return Status::ok();
}

StatusOr<bool>
GpuModelExecutable::runAsGraph(const EntrySpec &entry, void *function,
                               const std::vector<const CarriedTensor *> &inputs,
                               int64_t tokens, const std::vector<bool> &keep,
                               const std::vector<bool> &donated,
                               std::vector<CarriedRef> &outputs) const {
  // Collectives synchronise with the host, and kernel modules and
  // cuBLASLt's choices are made by a direct call first. A profiled call is
  // captured with its events as graph nodes: replayed without the host's
  // gaps between launches, they time the kernels alone.
  if (!graphs_ || comm_ || uncapturable_.count(entry.name) ||
      directCalls_[entry.name] == 0 || inputs.size() != entry.inputs.size())
    return false;
  std::optional<GraphCall> c = graphCallOf(entry, inputs, keep, donated);
  if (!c)
    return false;
  auto found = std::find_if(captured_.begin(), captured_.end(),
                            [&](const auto &g) { return g->key == c->key; });
  if (found != captured_.end()) {
    captured_.splice(captured_.begin(), captured_, found);
  } else {
    // A key is captured when it comes a second time in a row (the same
    // shapes and caches; states may have moved): a graph is worth its
    // capture only if it is replayed. A chunked prefill's steps (each a new
    // padded length) and a bucket's first decode step run directly;
    // capturing them cost k3-mini's 8K prefill 6 ms (stop 50).
    std::string &last = lastKey_[entry.name];
    if (last != c->repeat) {
      last = c->repeat;
      return false;
    }
    KIMI_ASSIGN_OR_RETURN(bool captured,
                          captureGraph(entry, function, *c, inputs, tokens));
    if (!captured)
      return false;
  }
  KIMI_RETURN_IF_ERROR(replayGraph(*captured_.front(), entry, inputs, keep,
                                   !c->inPlace.empty(), outputs));
  return true;
}

} // namespace kimi::rt
