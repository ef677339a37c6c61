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
  s->batch_ = s->decode_->inputs[0].shape[0]; // prefill's too (validated)
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

namespace {
/// Appends `added` rows per sequence to a [B, rows, ...] cache.
void appendCacheRows(std::vector<uint8_t> &cache, const uint8_t *added,
                     size_t addedBytes, int64_t batch) {
  if (batch == 1) {
    cache.insert(cache.end(), added, added + addedBytes);
    return;
  }
  const size_t oldPer = cache.size() / size_t(batch);
  const size_t addPer = addedBytes / size_t(batch);
  std::vector<uint8_t> grown(cache.size() + addedBytes);
  for (size_t b = 0; b < size_t(batch); ++b) {
    std::memcpy(grown.data() + b * (oldPer + addPer), cache.data() + b * oldPer,
                oldPer);
    std::memcpy(grown.data() + b * (oldPer + addPer) + oldPer,
                added + b * addPer, addPer);
  }
  cache = std::move(grown);
}
} // namespace

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
    return {restoredLogits_.data(), batch_, vocab_};
  return {nullptr, 0, vocab_};
}

StatusOr<HostTensor> Session::step(bool usePrefill, const int32_t *tokens,
                                   int64_t count) {
  const EntrySpec &entry = usePrefill ? *prefill_ : *decode_;
  KIMI_ASSIGN_OR_RETURN(HostBuffer tokBuf,
                        HostBuffer::allocate(size_t(batch_ * count) * 4));
  std::memcpy(tokBuf.data, tokens, size_t(batch_ * count) * 4);
  HostTensor tok{DType::kI32, {batch_, count}, tokBuf};

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
  if (outs[logitsAt].bytes() !=
      static_cast<size_t>(batch_ * count * vocab_) * sizeof(float))
    return executionError("entry '" + entry.name + "': logits " +
                          shapeToString(outs[logitsAt].shape) + " hold " +
                          std::to_string(outs[logitsAt].bytes() / 4) +
                          " values, expected " + std::to_string(batch_) +
                          " x " + std::to_string(count) + " x " +
                          std::to_string(vocab_));
  for (size_t i = 0; i < slots_.size(); ++i) {
    HostTensor &out = outs[usePrefill ? slots_[i].prefillOut : slots_[i].decodeOut];
    if (slots_[i].role == TensorRole::kState)
      states_[i] = std::move(out);
    else
      appendCacheRows(caches_[i], out.data(), out.bytes(), batch_);
  }
  return std::move(outs[logitsAt]);
}

StatusOr<LogitsView> Session::prefill(const int32_t *tokens, size_t count) {
  if (count == 0)
    return invalidArgument("prefill needs at least one token");
  if (!tokens)
    return invalidArgument("prefill: null token array");
  if (count % size_t(batch_))
    return invalidArgument("prefill of " + std::to_string(count) +
                           " tokens: the session steps " +
                           std::to_string(batch_) +
                           " sequences of equal length, so the count must "
                           "be a multiple of " + std::to_string(batch_));
  KIMI_RETURN_IF_ERROR(checkTokens(tokens, count));
  // Tokens per sequence.
  const int64_t t = static_cast<int64_t>(count) / batch_;
  if (maxPositions_ > 0 && t > maxPositions_)
    return invalidArgument("prefill of " + std::to_string(t) +
                           " tokens exceeds max_position_embeddings " +
                           std::to_string(maxPositions_));
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
    auto all =
        HostBuffer::allocate(static_cast<size_t>(batch_ * t * vocab_) * 4);
    if (!all.isOk()) {
      restore();
      return all.status();
    }
    std::vector<int32_t> part;
    int64_t done = 0;
    while (done < t) {
      bool chunk = t - done >= prefillChunk_;
      int64_t n = chunk ? prefillChunk_ : 1;
      // Tokens [done, done + n) of every sequence.
      part.resize(size_t(batch_ * n));
      for (int64_t b = 0; b < batch_; ++b)
        std::memcpy(part.data() + b * n, tokens + b * t + done, size_t(n) * 4);
      StatusOr<HostTensor> rows = step(chunk, part.data(), n);
      if (!rows.isOk()) {
        restore();
        return rows.status();
      }
      const size_t rowBytes = size_t(vocab_) * 4;
      for (int64_t b = 0; b < batch_; ++b)
        std::memcpy(all->data + size_t(b * t + done) * rowBytes,
                    rows->data() + size_t(b * n) * rowBytes, size_t(n) * rowBytes);
      done += n;
    }
    logits_ = HostTensor{DType::kF32, {batch_, t, vocab_}, *all};
  } else {
    KIMI_ASSIGN_OR_RETURN(HostBuffer tokBuf, HostBuffer::allocate(count * 4));
    std::memcpy(tokBuf.data, tokens, count * 4);
    HostTensor tok{DType::kI32, {batch_, t}, tokBuf};
    std::vector<HostTensor> outs;
    KIMI_RETURN_IF_ERROR(exe_->run("prefill", {&tok}, t, outs));
    const HostTensor &newLogits = outs[prefillLogits_];
    if (newLogits.bytes() !=
        static_cast<size_t>(batch_ * t * vocab_) * sizeof(float))
      return executionError("entry 'prefill': logits " +
                            shapeToString(newLogits.shape) + " hold " +
                            std::to_string(newLogits.bytes() / 4) +
                            " values, expected " + std::to_string(batch_) +
                            " x " + std::to_string(t) + " x " +
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
  logitsRows_ = batch_ * t;
  restoredLogits_.clear();
  started_ = true;
  length_ = t;
  counters_.prefillCalls += 1;
  counters_.prefillTokens += batch_ * t;
  counters_.prefillSeconds += seconds;
  updateMemory();
  return logits();
}

StatusOr<LogitsView> Session::decode(const int32_t *tokens, size_t count) {
  if (!started_)
    return failedPrecondition("decode step before prefill: the session has no "
                              "sequence yet");
  if (!tokens)
    return invalidArgument("decode: null token array");
  if (static_cast<int64_t>(count) != batch_)
    return invalidArgument("decode step with " + std::to_string(count) +
                           " tokens: the session steps " +
                           std::to_string(batch_) +
                           " sequences, one token each");
  KIMI_RETURN_IF_ERROR(checkTokens(tokens, count));
  if (maxPositions_ > 0 && length_ + 1 > maxPositions_)
    return invalidArgument("decode step at position " + std::to_string(length_) +
                           " exceeds max_position_embeddings " +
                           std::to_string(maxPositions_));
  // step() changes states and caches only after the call succeeded.
  auto start = std::chrono::steady_clock::now();
  KIMI_ASSIGN_OR_RETURN(HostTensor rows, step(false, tokens, 1));
  const double seconds = secondsSince(start);
  logits_ = std::move(rows);
  logitsRows_ = batch_;
  restoredLogits_.clear();
  length_ += 1;
  counters_.decodeCalls += 1;
  counters_.decodeTokens += batch_;
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
  // The last row of every sequence (rows are sequence-major).
  LogitsView l = logits();
  const int64_t perSequence = l.rows / batch_;
  for (int64_t b = 0; b < batch_ && perSequence > 0; ++b) {
    const float *last = l.data + ((b + 1) * perSequence - 1) * vocab_;
    snap.lastLogits.insert(snap.lastLogits.end(), last, last + vocab_);
  }
  return snap;
}

Status Session::restoreState(const SessionSnapshot &snap) {
  const std::string what = "restore state: ";
  if (snap.states.size() != slots_.size() || snap.caches.size() != slots_.size())
    return invalidArgument(what + "snapshot has " +
                           std::to_string(snap.states.size()) +
                           " slots, this session " +
                           std::to_string(slots_.size()));
  if (static_cast<int64_t>(snap.lastLogits.size()) != batch_ * vocab_)
    return invalidArgument(what + "snapshot logits have " +
                           std::to_string(snap.lastLogits.size()) +
                           " values, expected " + std::to_string(batch_) +
                           " sequences x vocab size " + std::to_string(vocab_));
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
