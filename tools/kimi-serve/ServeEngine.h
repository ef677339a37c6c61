//===- ServeEngine.h - Requests queued and generated on slots --*- C++ -*-===//
//
// The server's engine: a bounded queue of requests and `slots` workers,
// each with its own one-sequence Session over the shared Executable, which
// take the oldest request, generate it with the runtime's generation loop
// and pass its text to the request as it becomes final. A request that is
// cancelled (its client went away) stops at its next token and frees the
// slot. Every request of a slot runs alone: sequences are not yet batched
// into one compiled decode step (issue 33).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TOOLS_KIMI_SERVE_SERVEENGINE_H
#define KIMI_TOOLS_KIMI_SERVE_SERVEENGINE_H

#include "runtime/session/executable.h"
#include "runtime/session/session.h"
#include "runtime/text/generate.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kimi::serve {

using Clock = std::chrono::steady_clock;

/// One request's generation and the channel its handler reads.
struct Job {
  std::vector<int32_t> prompt;
  rt::GenerateOptions options;
  const rt::Tokenizer *tokenizer = nullptr;

  std::atomic<bool> cancelled{false};
  std::mutex mutex;
  std::condition_variable changed;
  std::string pending;       // text not yet taken by the handler
  std::vector<int32_t> pendingTokens; // and the tokens it came with
  bool started = false, done = false;
  rt::Status status;
  rt::GenerateResult result;
  Clock::time_point queued, lastToken;
  int64_t tokens = 0;
};

struct EngineMetrics {
  std::atomic<int64_t> finished{0}, failed{0}, cancelled{0}, rejected{0};
  std::atomic<int64_t> promptTokens{0}, generatedTokens{0};
  std::atomic<int64_t> running{0};
  // Sums in microseconds, and counts, for Prometheus summaries.
  std::atomic<int64_t> ttftMicros{0}, ttftCount{0};
  std::atomic<int64_t> itlMicros{0}, itlCount{0};
  std::atomic<int64_t> sessionBytes{0};
};

class ServeEngine {
public:
  ServeEngine(std::shared_ptr<rt::Executable> executable, int slots, size_t maxQueue);
  ~ServeEngine();
  /// Creates the slots' sessions and starts the workers.
  rt::Status start();
  /// Queues a job; false when the queue holds maxQueue jobs already.
  bool submit(const std::shared_ptr<Job> &job);
  size_t queued() const;
  int slots() const { return slots_; }
  size_t maxQueue() const { return maxQueue_; }
  EngineMetrics &metrics() { return metrics_; }

private:
  void work(int slot);

  std::shared_ptr<rt::Executable> exe_;
  int slots_;
  size_t maxQueue_;
  std::vector<std::unique_ptr<rt::Session>> sessions_;
  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  EngineMetrics metrics_;
};

} // namespace kimi::serve

#endif // KIMI_TOOLS_KIMI_SERVE_SERVEENGINE_H
