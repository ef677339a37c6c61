//===- session.cpp - One generation sequence ------------------------------===//

#include "runtime/session/session.h"
#include "runtime/artifact/validate.h"
#include "runtime/support/text.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kimi::rt {

namespace {
double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

size_t indexByName(const std::vector<TensorSpec> &specs, const std::string &name,
                   size_t notFound) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name)
      return i;
  return notFound;
}

size_t logitsIndex(const EntrySpec &e) {
  for (size_t i = 0; i < e.outputs.size(); ++i)
    if (e.outputs[i].role == TensorRole::kLogits)
      return i;
  return 0;
}
} // namespace

int64_t SessionSnapshot::bytes() const {
  int64_t n = static_cast<int64_t>(lastLogits.size() * sizeof(float));
  for (const HostTensor &t : states)
    n += static_cast<int64_t>(t.bytes());
  for (const auto &c : caches)
    n += static_cast<int64_t>(c.size());
  return n;
}

StatusOr<std::unique_ptr<Session>>
Session::create(std::shared_ptr<const Executable> executable) {
  if (!executable)
    return invalidArgument("session: null executable");
  const ArtifactSpec &a = executable->artifact();
  std::unique_ptr<Session> s(new Session());
  s->prefill_ = a.findEntry("prefill");
  s->decode_ = a.findEntry("decode");
  if (!s->prefill_ || !s->decode_)
    return invalidArtifact("session: the artifact needs 'prefill' and 'decode'");
  for (const EntrySpec *e : {s->prefill_, s->decode_})
    if (e->inputs[0].shape[0] != 1)
      return invalidArgument(
          "session: entry " + quoted(e->name) + " takes a batch of " +
          std::to_string(e->inputs[0].shape[0]) +
          " sequences per rank; a session runs one (kimi-compile --batch 1, "
          "or with --strategy dp one per data-parallel group; a batched "
          "artifact's entries can be called directly, as kimi-bench-model "
          "does)");
  s->prefillLogits_ = logitsIndex(*s->prefill_);
  s->decodeLogits_ = logitsIndex(*s->decode_);
  s->vocab_ = a.model.vocabSize;
  s->maxPositions_ = a.model.maxPositions;
  const size_t npos = static_cast<size_t>(-1);
  for (size_t i = 0; i < s->prefill_->outputs.size(); ++i) {
    const TensorSpec &spec = s->prefill_->outputs[i];
    if (spec.role != TensorRole::kState && spec.role != TensorRole::kCache)
      continue;
    size_t decodeIn = indexByName(s->decode_->inputs, spec.name, npos);
    // Caches take decode's input layout (the dynamic past length).
    const TensorSpec &layout =
        decodeIn == npos ? spec : s->decode_->inputs[decodeIn];
    Slot slot{spec.name, spec.role, layout,
              indexByName(s->prefill_->inputs, spec.name, npos), i, decodeIn,
              indexByName(s->decode_->outputs, spec.name, npos),
              spec.role == TensorRole::kCache ? cacheRowBytes(layout) : 0};
    if (slot.decodeIn == npos || slot.decodeOut == npos)
      return invalidArtifact("session: " + std::string(roleName(spec.role)) + " " +
                             quoted(spec.name) +
                             " is not both an input and an output of 'decode'");
    s->slots_.push_back(std::move(slot));
  }
  if (s->prefill_->inputs.size() > 1)
    s->prefillChunk_ = s->prefill_->inputs[0].shape[1];
  s->states_.resize(s->slots_.size());
  s->caches_.resize(s->slots_.size());
  s->exe_ = std::move(executable);
  return s;
}

Status Session::checkTokens(const int32_t *tokens, size_t count) const {
  for (size_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_)
      return invalidArgument("token id " + std::to_string(tokens[i]) +
                             " at position " + std::to_string(i) +
                             " is outside the vocabulary [0, " +
                             std::to_string(vocab_) + ")");
  return Status::ok();
}

void Session::updateMemory() {
  int64_t n = static_cast<int64_t>(logits_.bytes() +
                                   restoredLogits_.size() * sizeof(float));
  for (const HostTensor &t : states_)
    n += static_cast<int64_t>(t.bytes());
  for (const auto &c : caches_)
    n += static_cast<int64_t>(c.size());
  counters_.currentBytes = n;
  counters_.peakBytes = std::max(counters_.peakBytes, n);
}

LogitsView Session::logits() const {
  if (logitsRows_ > 0)
    return {reinterpret_cast<const float *>(logits_.data()), logitsRows_, vocab_};
  if (!restoredLogits_.empty())
    return {restoredLogits_.data(), 1, vocab_};
  return {nullptr, 0, vocab_};
}

StatusOr<HostTensor> Session::step(bool usePrefill, const int32_t *tokens,
                                   int64_t count) {
  const EntrySpec &entry = usePrefill ? *prefill_ : *decode_;
  KIMI_ASSIGN_OR_RETURN(HostBuffer tokBuf, HostBuffer::allocate(count * 4));
  std::memcpy(tokBuf.data, tokens, count * 4);
  HostTensor tok{DType::kI32, {1, count}, tokBuf};

  // Inputs in the entry's signature order.
  std::vector<HostTensor> cacheViews(slots_.size());
  std::vector<const HostTensor *> inputs(entry.inputs.size(), nullptr);
  inputs[0] = &tok;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    size_t in = usePrefill ? slot.prefillIn : slot.decodeIn;
    if (slot.role == TensorRole::kState) {
      inputs[in] = &states_[i];
      continue;
    }
    HostTensor &view = cacheViews[i];
    view.dtype = slot.spec.dtype;
    view.shape = slot.spec.shape;
    const int64_t rows = static_cast<int64_t>(caches_[i].size()) / slot.rowBytes;
    for (int64_t &d : view.shape)
      if (d == -1)
        d = rows;
    view.buffer.data = caches_[i].data();
    view.buffer.size = caches_[i].size();
    inputs[in] = &view;
  }

  std::vector<HostTensor> outs;
  KIMI_RETURN_IF_ERROR(exe_->run(entry.name, inputs, count, outs));
  size_t logitsAt = usePrefill ? prefillLogits_ : decodeLogits_;
  if (outs[logitsAt].bytes() != static_cast<size_t>(count * vocab_) * sizeof(float))
    return executionError("entry '" + entry.name + "': logits " +
                          shapeToString(outs[logitsAt].shape) + " hold " +
                          std::to_string(outs[logitsAt].bytes() / 4) +
                          " values, expected " + std::to_string(count) + " x " +
                          std::to_string(vocab_));
  for (size_t i = 0; i < slots_.size(); ++i) {
    HostTensor &out = outs[usePrefill ? slots_[i].prefillOut : slots_[i].decodeOut];
    if (slots_[i].role == TensorRole::kState)
      states_[i] = std::move(out);
    else
      caches_[i].insert(caches_[i].end(), out.data(), out.data() + out.bytes());
  }
  return std::move(outs[logitsAt]);
}

StatusOr<LogitsView> Session::prefill(const int32_t *tokens, size_t count) {
  if (count == 0)
    return invalidArgument("prefill needs at least one token");
  if (!tokens)
    return invalidArgument("prefill: null token array");
  KIMI_RETURN_IF_ERROR(checkTokens(tokens, count));
  if (maxPositions_ > 0 && static_cast<int64_t>(count) > maxPositions_)
    return invalidArgument("prefill of " + std::to_string(count) +
                           " tokens exceeds max_position_embeddings " +
                           std::to_string(maxPositions_));
  const int64_t t = static_cast<int64_t>(count);
  auto start = std::chrono::steady_clock::now();

  if (prefillChunk_ > 0) {
    // Stateful prefill: zero state, floor(T/C) chunk steps, then decode
    // steps; on failure the session keeps its previous sequence.
    std::vector<HostTensor> savedStates = states_;
    std::vector<std::vector<uint8_t>> savedCaches = caches_;
    auto restore = [&] {
      states_ = std::move(savedStates);
      caches_ = std::move(savedCaches);
    };
    for (size_t i = 0; i < slots_.size(); ++i) {
      caches_[i].clear();
      if (slots_[i].role != TensorRole::kState)
        continue;
      auto zero = HostBuffer::allocate(staticBytes(slots_[i].spec));
      if (!zero.isOk()) {
        restore();
        return zero.status();
      }
      states_[i] = HostTensor{slots_[i].spec.dtype, slots_[i].spec.shape,
                              *zero};
    }
    auto all = HostBuffer::allocate(static_cast<size_t>(t * vocab_) * 4);
    if (!all.isOk()) {
      restore();
      return all.status();
    }
    int64_t done = 0;
    while (done < t) {
      bool chunk = t - done >= prefillChunk_;
      int64_t n = chunk ? prefillChunk_ : 1;
      StatusOr<HostTensor> rows = step(chunk, tokens + done, n);
      if (!rows.isOk()) {
        restore();
        return rows.status();
      }
      std::memcpy(all->data + done * vocab_ * 4, rows->data(), rows->bytes());
      done += n;
    }
    logits_ = HostTensor{DType::kF32, {1, t, vocab_}, *all};
  } else {
    KIMI_ASSIGN_OR_RETURN(HostBuffer tokBuf, HostBuffer::allocate(count * 4));
    std::memcpy(tokBuf.data, tokens, count * 4);
    HostTensor tok{DType::kI32, {1, t}, tokBuf};
    std::vector<HostTensor> outs;
    KIMI_RETURN_IF_ERROR(exe_->run("prefill", {&tok}, t, outs));
    const HostTensor &newLogits = outs[prefillLogits_];
    if (newLogits.bytes() != static_cast<size_t>(t * vocab_) * sizeof(float))
      return executionError("entry 'prefill': logits " +
                            shapeToString(newLogits.shape) + " hold " +
                            std::to_string(newLogits.bytes() / 4) +
                            " values, expected " + std::to_string(t) + " x " +
                            std::to_string(vocab_));
    for (size_t i = 0; i < slots_.size(); ++i) {
      HostTensor &out = outs[slots_[i].prefillOut];
      if (slots_[i].role == TensorRole::kState) {
        states_[i] = std::move(out);
        caches_[i].clear();
      } else {
        states_[i] = HostTensor();
        caches_[i].assign(out.data(), out.data() + out.bytes());
      }
    }
    logits_ = std::move(outs[prefillLogits_]);
  }
  const double seconds = secondsSince(start);
  logitsRows_ = t;
  restoredLogits_.clear();
  started_ = true;
  length_ = t;
  counters_.prefillCalls += 1;
  counters_.prefillTokens += t;
  counters_.prefillSeconds += seconds;
  updateMemory();
  return logits();
}

StatusOr<LogitsView> Session::decodeStep(int32_t token) {
  if (!started_)
    return failedPrecondition("decode step before prefill: the session has no "
                              "sequence yet");
  KIMI_RETURN_IF_ERROR(checkTokens(&token, 1));
  if (maxPositions_ > 0 && length_ + 1 > maxPositions_)
    return invalidArgument("decode step at position " + std::to_string(length_) +
                           " exceeds max_position_embeddings " +
                           std::to_string(maxPositions_));
  // step() changes states and caches only after the call succeeded.
  auto start = std::chrono::steady_clock::now();
  KIMI_ASSIGN_OR_RETURN(HostTensor rows, step(false, &token, 1));
  const double seconds = secondsSince(start);
  logits_ = std::move(rows);
  logitsRows_ = 1;
  restoredLogits_.clear();
  length_ += 1;
  counters_.decodeCalls += 1;
  counters_.decodeTokens += 1;
  counters_.decodeSeconds += seconds;
  updateMemory();
  return logits();
}

StatusOr<SessionSnapshot> Session::saveState() const {
  if (!started_)
    return failedPrecondition("save state before prefill: the session has no "
                              "sequence yet");
  SessionSnapshot snap;
  snap.states = states_; // immutable buffers: sharing is copying
  snap.caches = caches_;
  snap.length = length_;
  LogitsView l = logits();
  if (l.rows > 0)
    snap.lastLogits.assign(l.data + (l.rows - 1) * vocab_, l.data + l.rows * vocab_);
  return snap;
}

Status Session::restoreState(const SessionSnapshot &snap) {
  const std::string what = "restore state: ";
  if (snap.states.size() != slots_.size() || snap.caches.size() != slots_.size())
    return invalidArgument(what + "snapshot has " +
                           std::to_string(snap.states.size()) +
                           " slots, this session " +
                           std::to_string(slots_.size()));
  if (static_cast<int64_t>(snap.lastLogits.size()) != vocab_)
    return invalidArgument(what + "snapshot logits have " +
                           std::to_string(snap.lastLogits.size()) +
                           " values, vocab size is " + std::to_string(vocab_));
  if (snap.length <= 0 || (maxPositions_ > 0 && snap.length > maxPositions_))
    return invalidArgument(what + "snapshot length " + std::to_string(snap.length) +
                           " is out of range");
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    if (slot.role == TensorRole::kState) {
      const HostTensor &t = snap.states[i];
      if (t.dtype != slot.spec.dtype || t.shape != slot.spec.shape ||
          t.bytes() != static_cast<size_t>(staticBytes(slot.spec)))
        return invalidArgument(what + "state " + quoted(slot.name) +
                               " does not match the artifact");
    } else if (snap.caches[i].size() !=
               static_cast<size_t>(slot.rowBytes * snap.length)) {
      return invalidArgument(what + "cache " + quoted(slot.name) + " has " +
                             std::to_string(snap.caches[i].size()) +
                             " bytes, expected " + std::to_string(snap.length) +
                             " rows of " + std::to_string(slot.rowBytes));
    }
  }
  states_ = snap.states;
  caches_ = snap.caches;
  length_ = snap.length;
  restoredLogits_ = snap.lastLogits;
  logits_ = HostTensor();
  logitsRows_ = 0;
  started_ = true;
  updateMemory();
  return Status::ok();
}

} // namespace kimi::rt
