//===- session.h - One generation sequence ----------------------*- C++ -*-===//
//
// Session semantics of docs/runtime-abi.md. A session steps the B sequences
// of its artifact's entries together (B = 1 unless compiled with --batch B),
// all of the same length:
//  * prefill(tokens[B * T]) runs `prefill` on B fresh sequences of T tokens
//    each (row-major), keeps the returned states and cache rows, and returns
//    logits [B, T, V];
//  * decode(tokens[B]) (decodeStep(token) when B = 1) runs `decode` with the
//    session's states and whole caches, replaces the states, appends the
//    returned cache rows of every sequence, and returns logits [B, 1, V];
//  * token ids outside [0, vocab) are rejected before any call;
//  * a failed call leaves the session as it was. One exception: a decode
//    step donates the states only the session holds (Executable::runCarried),
//    and a GPU model updates them in place; when that step's cache append
//    then fails (out of device memory), the sequence is lost, and the
//    session says so and needs a prefill or a restored snapshot. A snapshot
//    holds its states, so they are never donated while it lives.
// States and caches are matched by name between the entries. They stay
// where the executable keeps them (device memory for GPU models, see
// carried_tensor.h); only tokens go in and logits come out. A snapshot
// (saveState) shares the states and caches (no copy) and holds the last
// logits row; it can be restored into any session of the same artifact
// (prefix reuse).
//
// A session is not thread-safe; different sessions may run concurrently,
// also when they share one Executable.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SESSION_SESSION_H
#define KIMI_RUNTIME_SESSION_SESSION_H

#include "runtime/session/executable.h"
#include "runtime/cpu/host_tensor.h"
#include "runtime/support/status.h"

#include <memory>
#include <vector>

namespace kimi::rt {

struct SessionCounters {
  int64_t prefillCalls = 0;
  int64_t decodeCalls = 0;
  int64_t prefillTokens = 0;
  int64_t decodeTokens = 0;
  double prefillSeconds = 0;
  double decodeSeconds = 0;
  /// Bytes the session holds now (states, caches, logits) and at most so far.
  int64_t currentBytes = 0;
  int64_t peakBytes = 0;
};

/// Row-major logits owned by the session, valid until its next call.
struct LogitsView {
  const float *data = nullptr;
  int64_t rows = 0;
  int64_t vocab = 0;
};

/// Which logits a prefill returns. The entry computes every row either way;
/// kLast copies only the last row of each sequence out of the executable
/// (for a GPU model, 1 of T rows crosses PCIe: 1 GB -> 128 KB for an
/// 8K-token prompt of a 32K vocabulary), which is all that generation needs.
enum class PrefillLogits { kAll, kLast };

/// A session's sequence state (see saveState).
struct SessionSnapshot {
  /// Per slot (Session::slots()): the state, or the cache [B, length, ...].
  /// Shared and immutable.
  std::vector<CarriedRef> tensors;
  std::vector<float> lastLogits;           // [B, V]
  int64_t length = 0;                      // tokens in each sequence
  int64_t bytes() const;
};

class Session {
public:
  static StatusOr<std::unique_ptr<Session>>
  create(std::shared_ptr<const Executable> executable);

  /// Starts B new sequences from `count` = B * T tokens (T >= 1; sequence b
  /// is tokens[b*T, (b+1)*T)); logits [B * T, V], sequence-major, or with
  /// PrefillLogits::kLast the last row of each sequence, [B, V].
  StatusOr<LogitsView> prefill(const int32_t *tokens, size_t count,
                               PrefillLogits which = PrefillLogits::kAll);
  StatusOr<LogitsView> prefill(const std::vector<int32_t> &tokens,
                               PrefillLogits which = PrefillLogits::kAll) {
    return prefill(tokens.data(), tokens.size(), which);
  }
  /// Extends every sequence by one token (`count` = B); logits [B, V].
  StatusOr<LogitsView> decode(const int32_t *tokens, size_t count);
  /// decode() of a one-sequence session.
  StatusOr<LogitsView> decodeStep(int32_t token) { return decode(&token, 1); }
  /// Sequences stepped together (the entries' batch).
  int64_t batch() const { return batch_; }

  /// The logits of the last call (rows = 0 before any).
  LogitsView logits() const;
  int64_t vocabSize() const { return vocab_; }
  /// Tokens in each sequence so far.
  int64_t length() const { return length_; }
  const SessionCounters &counters() const { return counters_; }

  /// The sequence state, shared with the session (fails before the first
  /// prefill).
  StatusOr<SessionSnapshot> saveState() const;
  /// Replaces the sequence state with `snapshot`; logits() then returns its
  /// last logits row. Tensors another executable keeps are copied here.
  Status restoreState(const SessionSnapshot &snapshot);

  /// Names and roles of the carried tensors, in slot order.
  struct Slot {
    std::string name;
    TensorRole role;
    TensorSpec spec;     // from prefill's outputs
    size_t prefillIn;    // index in prefill inputs (stateful prefill only)
    size_t prefillOut;   // index in prefill outputs
    size_t decodeIn;     // index in decode inputs
    size_t decodeOut;    // index in decode outputs
  };
  const std::vector<Slot> &slots() const { return slots_; }

private:
  Session() = default;
  Status checkTokens(const int32_t *tokens, size_t count) const;
  void updateMemory();
  /// Runs `count` tokens of every sequence (tokens [B, count], row-major)
  /// through `prefill` (a stateful chunk step) or `decode` from the current
  /// states and caches, replacing the states and appending each sequence's
  /// cache rows; returns the logits [B, count, V], on the host unless
  /// `keepLogits`.
  /// `statesAdvanced`, on failure: the call succeeded with donated states,
  /// which may hold the next step now, and a cache append failed.
  StatusOr<CarriedRef> step(bool usePrefill, const int32_t *tokens,
                            int64_t count, bool keepLogits, bool &statesAdvanced);
  /// Calls `entry` on tokens [B, count] and the session's states and caches
  /// (where the entry takes them); states and cache rows come back where
  /// the executable keeps them, the logits (checked) on the host, or where
  /// the executable computes them when `keepLogits`.
  /// `donatedAny`: some state was donated to the call (it may have been
  /// updated in place).
  StatusOr<std::vector<CarriedRef>> call(const EntrySpec &entry, bool usePrefill,
                                         const int32_t *tokens, int64_t count,
                                         bool keepLogits, CarriedRef &logits,
                                         bool &donatedAny);
  /// The last row of each sequence of `logits` [B, count, V]: [B, 1, V].
  StatusOr<HostTensor> lastRows(const CarriedTensor &logits,
                                int64_t count) const;

  std::shared_ptr<const Executable> exe_;
  const EntrySpec *prefill_ = nullptr;
  const EntrySpec *decode_ = nullptr;
  size_t prefillLogits_ = 0, decodeLogits_ = 0;
  /// Tokens of one stateful prefill step; 0 when prefill takes a whole
  /// sequence from zero state.
  int64_t prefillChunk_ = 0;
  /// `prefill` returns each sequence's last logits row only ([B, 1, V]:
  /// kimi-compile --prefill-logits=last).
  bool prefillLastOnly_ = false;
  int64_t vocab_ = 0;
  int64_t maxPositions_ = 0;
  int64_t batch_ = 1;
  std::vector<Slot> slots_;

  bool started_ = false;
  int64_t length_ = 0;
  /// Per slot: the state, or the cache [B, L, ...] (null before any rows).
  std::vector<CarriedRef> carried_;
  HostTensor logits_;
  int64_t logitsRows_ = 0;
  std::vector<float> restoredLogits_;
  SessionCounters counters_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SESSION_SESSION_H
