//===- session.h - One generation sequence ----------------------*- C++ -*-===//
//
// Session semantics of docs/runtime-abi.md (one sequence: entries of batch 1;
// Session::create refuses batched artifacts):
//  * prefill(tokens[T]) runs `prefill` on a fresh sequence, keeps the returned
//    states and cache rows, and returns logits [T, V];
//  * decodeStep(token) runs `decode` with the session's states and whole
//    caches, replaces the states, appends the returned cache rows, and
//    returns logits [V];
//  * token ids outside [0, vocab) are rejected before any call;
//  * a failed call leaves the session as it was.
// States and caches are matched by name between the entries. A snapshot
// (saveState) holds the states, the caches and the last logits row; it can
// be restored into any session of the same artifact (prefix reuse).
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

/// A copy of a session's sequence state (see saveState).
struct SessionSnapshot {
  std::vector<HostTensor> states;          // shared, immutable
  std::vector<std::vector<uint8_t>> caches;
  std::vector<float> lastLogits;           // [V]
  int64_t length = 0;                      // tokens in the sequence
  int64_t bytes() const;
};

class Session {
public:
  static StatusOr<std::unique_ptr<Session>>
  create(std::shared_ptr<const Executable> executable);

  /// Starts a new sequence with `count` >= 1 tokens; logits [count, V].
  StatusOr<LogitsView> prefill(const int32_t *tokens, size_t count);
  StatusOr<LogitsView> prefill(const std::vector<int32_t> &tokens) {
    return prefill(tokens.data(), tokens.size());
  }
  /// Extends the sequence by one token; logits [1, V].
  StatusOr<LogitsView> decodeStep(int32_t token);

  /// The logits of the last call (rows = 0 before any).
  LogitsView logits() const;
  int64_t vocabSize() const { return vocab_; }
  /// Tokens in the sequence so far.
  int64_t length() const { return length_; }
  const SessionCounters &counters() const { return counters_; }

  /// A copy of the sequence state (fails before the first prefill).
  StatusOr<SessionSnapshot> saveState() const;
  /// Replaces the sequence state with `snapshot`; logits() then returns its
  /// last logits row.
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
    int64_t rowBytes;    // caches: bytes per token
  };
  const std::vector<Slot> &slots() const { return slots_; }

private:
  Session() = default;
  Status checkTokens(const int32_t *tokens, size_t count) const;
  void updateMemory();
  /// Runs `count` tokens through `prefill` (a stateful chunk step) or
  /// `decode` from the current states and caches, replacing the states and
  /// appending the cache rows; returns the logits [count, V].
  StatusOr<HostTensor> step(bool usePrefill, const int32_t *tokens,
                            int64_t count);

  std::shared_ptr<const Executable> exe_;
  const EntrySpec *prefill_ = nullptr;
  const EntrySpec *decode_ = nullptr;
  size_t prefillLogits_ = 0, decodeLogits_ = 0;
  /// Tokens of one stateful prefill step; 0 when prefill takes a whole
  /// sequence from zero state.
  int64_t prefillChunk_ = 0;
  int64_t vocab_ = 0;
  int64_t maxPositions_ = 0;
  std::vector<Slot> slots_;

  bool started_ = false;
  int64_t length_ = 0;
  std::vector<HostTensor> states_;            // per slot (states only)
  std::vector<std::vector<uint8_t>> caches_;  // per slot (caches only)
  HostTensor logits_;
  int64_t logitsRows_ = 0;
  std::vector<float> restoredLogits_;
  SessionCounters counters_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SESSION_SESSION_H
