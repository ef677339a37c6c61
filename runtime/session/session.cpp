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
  for (const CarriedRef &t : tensors)
    n += t ? static_cast<int64_t>(t->bytes()) : 0;
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
              indexByName(s->decode_->outputs, spec.name, npos)};
    if (slot.decodeIn == npos || slot.decodeOut == npos)
      return invalidArtifact("session: " + std::string(roleName(spec.role)) + " " +
                             quoted(spec.name) +
                             " is not both an input and an output of 'decode'");
    s->slots_.push_back(std::move(slot));
  }
  if (s->prefill_->inputs.size() > 1)
    s->prefillChunk_ = s->prefill_->inputs[0].shape[1];
  {
    const std::vector<int64_t> &l = s->prefill_->outputs[s->prefillLogits_].shape;
    s->prefillLastOnly_ = l.size() == 3 && l[1] == 1 &&
                          s->prefill_->inputs[0].shape[1] != 1;
  }
  s->carried_.resize(s->slots_.size());
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
  for (const CarriedRef &t : carried_)
    n += t ? static_cast<int64_t>(t->bytes()) : 0;
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

StatusOr<std::vector<CarriedRef>>
Session::call(const EntrySpec &entry, bool usePrefill, const int32_t *tokens,
              int64_t count, bool keepLogits, CarriedRef &logits,
              bool &donatedAny) {
  KIMI_ASSIGN_OR_RETURN(HostBuffer tokBuf,
                        HostBuffer::allocate(size_t(batch_ * count) * 4));
  std::memcpy(tokBuf.data, tokens, size_t(batch_ * count) * 4);
  const HostCarriedTensor tok(HostTensor{DType::kI32, {batch_, count}, tokBuf});

  // Inputs in the entry's signature order; a cache without rows yet is an
  // empty host tensor [B, 0, ...].
  std::vector<CarriedRef> empties;
  std::vector<const CarriedTensor *> inputs(entry.inputs.size(), nullptr);
  inputs[0] = &tok;
  std::vector<bool> keep(entry.outputs.size(), false);
  // States only the session holds (no snapshot, no saved copy of a chunked
  // prefill) are donated: the executable may update them in place.
  std::vector<bool> donated(entry.inputs.size(), false);
  const size_t npos = static_cast<size_t>(-1);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    keep[usePrefill ? slot.prefillOut : slot.decodeOut] = true;
    const size_t in = usePrefill ? slot.prefillIn : slot.decodeIn;
    if (in == npos)
      continue; // a prefill from zero state takes tokens only
    if (!carried_[i]) {
      std::vector<int64_t> shape = slot.spec.shape;
      for (int64_t &d : shape)
        if (d == -1)
          d = 0;
      empties.push_back(std::make_shared<HostCarriedTensor>(
          HostTensor{slot.spec.dtype, std::move(shape), HostBuffer{}}));
      inputs[in] = empties.back().get();
      continue;
    }
    inputs[in] = carried_[i].get();
    donated[in] = slot.role == TensorRole::kState && carried_[i].use_count() == 1;
    donatedAny = donatedAny || donated[in];
  }
  // cache_length: the rows of the caches as passed (all have the same).
  std::unique_ptr<HostCarriedTensor> lengths;
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    if (entry.inputs[i].role != TensorRole::kCacheLength)
      continue;
    int64_t rows = 0;
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].role == TensorRole::kCache && carried_[s])
        rows = carried_[s]->shape()[1];
    KIMI_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::allocate(size_t(batch_) * 4));
    for (int64_t b = 0; b < batch_; ++b)
      reinterpret_cast<int32_t *>(buf.data)[b] = static_cast<int32_t>(rows);
    lengths = std::make_unique<HostCarriedTensor>(
        HostTensor{DType::kI32, {batch_}, std::move(buf)});
    inputs[i] = lengths.get();
  }

  const size_t logitsOut = usePrefill ? prefillLogits_ : decodeLogits_;
  keep[logitsOut] = keepLogits;
  std::vector<CarriedRef> outs;
  KIMI_RETURN_IF_ERROR(
      exe_->runCarried(entry.name, inputs, count, keep, donated, outs));
  const CarriedRef &l = outs[logitsOut];
  const int64_t rows = usePrefill && prefillLastOnly_ ? 1 : count;
  if (!l || (!keepLogits && !l->host()) || l->dtype() != DType::kF32 ||
      l->bytes() != static_cast<size_t>(batch_ * rows * vocab_) * sizeof(float))
    return executionError(
        "entry " + quoted(entry.name) + ": logits " +
        (l ? shapeToString(l->shape()) + " hold " +
                 std::to_string(l->bytes() / 4) + " values"
           : std::string("missing")) +
        ", expected " + std::to_string(batch_) + " x " +
        std::to_string(rows) + " x " + std::to_string(vocab_) +
        (keepLogits ? "" : " on the host"));
  logits = l;
  return outs;
}

StatusOr<HostTensor> Session::lastRows(const CarriedTensor &logits,
                                       int64_t count) const {
  KIMI_ASSIGN_OR_RETURN(HostBuffer rows,
                        HostBuffer::allocate(size_t(batch_ * vocab_) * 4));
  for (int64_t b = 0; b < batch_; ++b) {
    KIMI_ASSIGN_OR_RETURN(HostTensor row,
                          logits.rowsToHost(b * count + count - 1, 1));
    std::memcpy(rows.data + size_t(b * vocab_) * 4, row.data(),
                size_t(vocab_) * 4);
  }
  return HostTensor{DType::kF32, {batch_, 1, vocab_}, std::move(rows)};
}

StatusOr<CarriedRef> Session::step(bool usePrefill, const int32_t *tokens,
                                   int64_t count, bool keepLogits,
                                   bool &statesAdvanced) {
  statesAdvanced = false;
  const EntrySpec &entry = usePrefill ? *prefill_ : *decode_;
  CarriedRef logits;
  bool donated = false;
  KIMI_ASSIGN_OR_RETURN(
      std::vector<CarriedRef> outs,
      call(entry, usePrefill, tokens, count, keepLogits, logits, donated));
  // The new states and caches; the session changes only when all are made.
  std::vector<CarriedRef> next(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const CarriedRef &out =
        outs[usePrefill ? slots_[i].prefillOut : slots_[i].decodeOut];
    if (slots_[i].role == TensorRole::kState) {
      next[i] = out;
      continue;
    }
    StatusOr<CarriedRef> grown = exe_->appendRows(carried_[i], out, batch_);
    if (!grown.isOk()) {
      Status failed = grown.takeStatus().addContext("cache " + quoted(slots_[i].name));
      // The donated states may already hold the next step.
      statesAdvanced = donated;
      return failed;
    }
    next[i] = std::move(grown.value());
  }
  carried_ = std::move(next);
  return logits;
}

StatusOr<LogitsView> Session::prefill(const int32_t *tokens, size_t count,
                                      PrefillLogits which) {
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
  const bool lastOnly = which == PrefillLogits::kLast;
  if (!lastOnly && prefillLastOnly_)
    return invalidArgument(
        "prefill: every token's logits were asked for, but this artifact's "
        "'prefill' returns each sequence's last only (kimi-compile "
        "--prefill-logits=last); ask for the last rows, or compile with "
        "--prefill-logits=all");

  if (prefillChunk_ > 0) {
    // Stateful prefill: zero state, floor(T/C) chunk steps, then decode
    // steps; on failure the session keeps its previous sequence.
    std::vector<CarriedRef> saved = carried_;
    auto restore = [&] { carried_ = std::move(saved); };
    for (size_t i = 0; i < slots_.size(); ++i) {
      carried_[i] = nullptr;
      if (slots_[i].role != TensorRole::kState)
        continue;
      auto zero = exe_->carryZeros(slots_[i].spec.dtype, slots_[i].spec.shape);
      if (!zero.isOk()) {
        restore();
        return zero.status();
      }
      carried_[i] = std::move(zero.value());
    }
    // Every row is collected on the host; for the last rows only, each
    // step's logits stay where they are computed and only the final step's
    // last rows are copied.
    HostBuffer all;
    if (!lastOnly) {
      auto buffer =
          HostBuffer::allocate(static_cast<size_t>(batch_ * t * vocab_) * 4);
      if (!buffer.isOk()) {
        restore();
        return buffer.status();
      }
      all = std::move(buffer.value());
    }
    std::vector<int32_t> part;
    CarriedRef rows;
    int64_t done = 0, n = 0;
    while (done < t) {
      bool chunk = t - done >= prefillChunk_;
      n = chunk ? prefillChunk_ : 1;
      // Tokens [done, done + n) of every sequence.
      part.resize(size_t(batch_ * n));
      for (int64_t b = 0; b < batch_; ++b)
        std::memcpy(part.data() + b * n, tokens + b * t + done, size_t(n) * 4);
      bool advanced = false; // `saved` holds the old sequence: never donated
      StatusOr<CarriedRef> stepped = step(chunk, part.data(), n, lastOnly, advanced);
      if (!stepped.isOk()) {
        restore();
        return stepped.status();
      }
      rows = std::move(stepped.value());
      if (!lastOnly) {
        const size_t rowBytes = size_t(vocab_) * 4;
        for (int64_t b = 0; b < batch_; ++b)
          std::memcpy(all.data + size_t(b * t + done) * rowBytes,
                      rows->host()->data() + size_t(b * n) * rowBytes,
                      size_t(n) * rowBytes);
      }
      done += n;
    }
    if (lastOnly) {
      // (The final step's rows a sequence: 1 for --prefill-logits=last.)
      StatusOr<HostTensor> last = lastRows(*rows, rows->shape()[1]);
      if (!last.isOk()) {
        restore();
        return last.status();
      }
      logits_ = std::move(last.value());
    } else {
      logits_ = HostTensor{DType::kF32, {batch_, t, vocab_}, std::move(all)};
    }
  } else {
    // One call from zero state: its states and caches [B, T, ...] are the
    // session's as they come.
    CarriedRef logits;
    bool donated = false; // nothing: prefill from zero state takes no state
    KIMI_ASSIGN_OR_RETURN(
        std::vector<CarriedRef> outs,
        call(*prefill_, true, tokens, t, lastOnly, logits, donated));
    if (lastOnly) {
      KIMI_ASSIGN_OR_RETURN(logits_, lastRows(*logits, logits->shape()[1]));
    } else {
      logits_ = *logits->host();
    }
    for (size_t i = 0; i < slots_.size(); ++i)
      carried_[i] = outs[slots_[i].prefillOut];
  }
  const double seconds = secondsSince(start);
  logitsRows_ = lastOnly ? batch_ : batch_ * t;
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
  // step() changes states and caches only after the call succeeded, except
  // for states it donated when a cache append then fails (session.h).
  auto start = std::chrono::steady_clock::now();
  bool advanced = false;
  StatusOr<CarriedRef> stepped = step(false, tokens, 1, false, advanced);
  if (!stepped.isOk()) {
    if (!advanced)
      return stepped.status();
    started_ = false;
    length_ = 0;
    carried_.assign(slots_.size(), nullptr);
    logits_ = HostTensor();
    logitsRows_ = 0;
    restoredLogits_.clear();
    updateMemory();
    return stepped.takeStatus().addContext(
        "the sequence is lost (its states were updated in place); prefill "
        "again or restore a snapshot");
  }
  CarriedRef rows = std::move(stepped.value());
  const double seconds = secondsSince(start);
  logits_ = *rows->host();
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
  snap.tensors = carried_; // immutable: sharing is copying
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
  if (snap.tensors.size() != slots_.size())
    return invalidArgument(what + "snapshot has " +
                           std::to_string(snap.tensors.size()) +
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
  std::vector<CarriedRef> next(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    const CarriedRef &t = snap.tensors[i];
    std::vector<int64_t> expected = slot.spec.shape;
    for (int64_t &d : expected)
      if (d == -1)
        d = snap.length;
    if (!t || t->dtype() != slot.spec.dtype || t->shape() != expected)
      return invalidArgument(
          what + std::string(roleName(slot.role)) + " " + quoted(slot.name) +
          " is " +
          (t ? std::string(dtypeName(t->dtype())) + " " +
                   shapeToString(t->shape())
             : std::string("missing")) +
          ", the artifact expects " + dtypeName(slot.spec.dtype) + " " +
          shapeToString(expected));
    next[i] = t;
    if (t->residence() == exe_->residence())
      continue;
    // Kept by another executable: copy it here.
    StatusOr<HostTensor> host = t->toHost();
    if (!host.isOk())
      return host.takeStatus().addContext(what + quoted(slot.name));
    StatusOr<CarriedRef> here = exe_->carry(host.value());
    if (!here.isOk())
      return here.takeStatus().addContext(what + quoted(slot.name));
    next[i] = std::move(here.value());
  }
  carried_ = std::move(next);
  length_ = snap.length;
  restoredLogits_ = snap.lastLogits;
  logits_ = HostTensor();
  logitsRows_ = 0;
  started_ = true;
  updateMemory();
  return Status::ok();
}

} // namespace kimi::rt
