//===- ServeEngine.cpp - Requests queued and generated on slots -----------===//

#include "ServeEngine.h"

using namespace kimi::rt;

namespace kimi::serve {

namespace {
int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}
} // namespace

ServeEngine::ServeEngine(std::shared_ptr<Executable> executable, int slots, size_t maxQueue)
    : exe_(std::move(executable)), slots_(slots), maxQueue_(maxQueue) {}

ServeEngine::~ServeEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto &job : queue_)
      job->cancelled = true;
  }
  wake_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

Status ServeEngine::start() {
  for (int i = 0; i < slots_; ++i) {
    KIMI_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::create(exe_));
    if (s->batch() != 1)
      return invalidArgument("kimi-serve runs one-sequence artifacts; this one steps " +
                             std::to_string(s->batch()) +
                             " sequences together (compiled with --batch)");
    sessions_.push_back(std::move(s));
  }
  for (int i = 0; i < slots_; ++i)
    workers_.emplace_back([this, i] { work(i); });
  return Status::ok();
}

bool ServeEngine::submit(const std::shared_ptr<Job> &job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= maxQueue_) {
      ++metrics_.rejected;
      return false;
    }
    job->queued = Clock::now();
    queue_.push_back(job);
  }
  wake_.notify_one();
  return true;
}

size_t ServeEngine::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void ServeEngine::work(int slot) {
  Session &session = *sessions_[slot];
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_)
        return;
      job = queue_.front();
      queue_.pop_front();
    }
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->started = true;
    }
    ++metrics_.running;
    GenerateResult result;
    Status status = Status::ok();
    if (!job->cancelled) {
      status = generate(
          session, job->tokenizer, job->prompt, job->options,
          [&](int32_t token, std::string_view text) {
            const Clock::time_point now = Clock::now();
            {
              std::lock_guard<std::mutex> lock(job->mutex);
              if (token >= 0) {
                if (job->tokens == 0) {
                  metrics_.ttftMicros += micros(now - job->queued);
                  ++metrics_.ttftCount;
                } else {
                  metrics_.itlMicros += micros(now - job->lastToken);
                  ++metrics_.itlCount;
                }
                job->lastToken = now;
                ++job->tokens;
                job->pendingTokens.push_back(token);
              }
              job->pending.append(text.data(), text.size());
            }
            job->changed.notify_all();
            return !job->cancelled.load();
          },
          result);
    }
    metrics_.sessionBytes = session.counters().peakBytes;
    --metrics_.running;
    if (job->cancelled)
      ++metrics_.cancelled;
    else if (status.isOk())
      ++metrics_.finished;
    else
      ++metrics_.failed;
    metrics_.promptTokens += static_cast<int64_t>(job->prompt.size());
    metrics_.generatedTokens += static_cast<int64_t>(result.tokens.size());
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->result = std::move(result);
      job->status = std::move(status);
      job->done = true;
    }
    job->changed.notify_all();
  }
}

} // namespace kimi::serve
