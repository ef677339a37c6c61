//===- kimi-serve.cpp - an OpenAI-compatible HTTP server ------------------===//
//
// Serves a compiled model over HTTP (cpp-httplib from Debian): completions
// and chat completions (whole or streamed as server-sent events), the
// model list, health and Prometheus metrics. Requests are checked
// (OpenAiProtocol.*), queued with a bound, and generated on the engine's
// slots (ServeEngine.*).
//
//===----------------------------------------------------------------------===//

#include "OpenAiProtocol.h"
#include "ServeEngine.h"

#include "runtime/artifact/reader.h"
#include "runtime/session/executable.h"
#include "runtime/support/text.h"
#include "runtime/text/tokenizer.h"
#include "runtime/weights/json.h"
#include "runtime/weights/random_weights.h"
#include "runtime/weights/weight_loader.h"

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kimi::rt;
using namespace kimi::serve;

namespace {

const char *kUsage =
    "usage: kimi-serve MODEL.kimi (--weights PATH... | --random-weights SEED)\n"
    "                  --tokenizer DIR [--host 127.0.0.1] [--port N]\n"
    "                  [--slots N] [--max-queue N] [--served-model-name NAME]\n"
    "                  [--max-body-bytes N] [--device D]\n"
    "\n"
    "Serves a one-sequence model compiled by kimi-compile over an OpenAI-style\n"
    "HTTP API (docs/serve.md):\n"
    "  POST /v1/completions        prompt -> text (\"stream\": true: SSE)\n"
    "  POST /v1/chat/completions   messages in the Kimi chat format -> answer\n"
    "  GET  /v1/models             the served model\n"
    "  GET  /health                200 once the model is loaded\n"
    "  GET  /metrics               Prometheus text: requests, queue, time to\n"
    "                              first token, inter-token latency, tokens\n"
    "\n"
    "  --weights PATH        safetensors file, index or directory (repeatable)\n"
    "  --random-weights SEED deterministic random weights (tests and demos)\n"
    "  --tokenizer DIR       tiktoken.model (+ tokenizer_config.json)\n"
    "  --host H              address to listen on (default 127.0.0.1)\n"
    "  --port N              port (default 8000; 0 picks a free one)\n"
    "  --slots N             requests generated at once, each on its own\n"
    "                        session (default 1)\n"
    "  --max-queue N         requests waiting for a slot before new ones get\n"
    "                        429 (default 64)\n"
    "  --served-model-name S the name requests give as \"model\" (default: the\n"
    "                        artifact's file name without .kimi)\n"
    "  --max-body-bytes N    larger request bodies get 413 (default 8 MiB)\n"
    "  --device D            CUDA device of a GPU model (default 0)\n"
    "\n"
    "On start it prints 'kimi-serve: listening on http://HOST:PORT'.\n"
    "SIGINT or SIGTERM stops it.\n";

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "kimi-serve: error: %s\n", message.c_str());
  std::exit(1);
}

struct Options {
  std::string model, tokenizer, host = "127.0.0.1", servedName;
  std::vector<std::string> weights;
  long long randomSeed = -1, port = 8000, slots = 1, maxQueue = 64;
  long long maxBody = 8 << 20, device = 0;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    auto number = [&](long long lo, long long hi) -> long long {
      std::string v = value();
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || errno || n < lo || n > hi)
        die(a + " '" + v + "': expected an integer in [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]");
      return n;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--weights") {
      o.weights.push_back(value());
    } else if (a == "--random-weights") {
      o.randomSeed = number(0, INT64_MAX);
    } else if (a == "--tokenizer") {
      o.tokenizer = value();
    } else if (a == "--host") {
      o.host = value();
    } else if (a == "--port") {
      o.port = number(0, 65535);
    } else if (a == "--slots") {
      o.slots = number(1, 256);
    } else if (a == "--max-queue") {
      o.maxQueue = number(0, 100000);
    } else if (a == "--served-model-name") {
      o.servedName = value();
    } else if (a == "--max-body-bytes") {
      o.maxBody = number(1024, 1ll << 30);
    } else if (a == "--device") {
      o.device = number(0, 1024);
    } else if (!a.empty() && a[0] == '-') {
      die("unknown option '" + a + "' (see --help)");
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      die("more than one model given: '" + o.model + "' and '" + a + "'");
    }
  }
  if (o.model.empty())
    die("no model given (see --help)");
  if (o.weights.empty() == (o.randomSeed < 0))
    die("give exactly one of --weights and --random-weights");
  if (o.tokenizer.empty())
    die("--tokenizer DIR is required (the API takes and returns text)");
  if (o.servedName.empty()) {
    std::string base = o.model.substr(o.model.find_last_of('/') + 1);
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".kimi") == 0)
      base.resize(base.size() - 5);
    o.servedName = base;
  }
  return o;
}

void replyError(httplib::Response &res, const ApiError &e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

std::string metricsText(ServeEngine &engine, int64_t invalid, double uptime) {
  EngineMetrics &m = engine.metrics();
  std::string out;
  auto line = [&](const char *name, const char *type, const char *help,
                  const std::string &samples) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type +
           "\n" + samples;
  };
  auto sample = [](const std::string &name, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.9g\n", v);
    return name + buf;
  };
  line("kimi_requests_total", "counter", "Requests by outcome.",
       sample("kimi_requests_total{outcome=\"finished\"}", m.finished) +
           sample("kimi_requests_total{outcome=\"failed\"}", m.failed) +
           sample("kimi_requests_total{outcome=\"cancelled\"}", m.cancelled) +
           sample("kimi_requests_total{outcome=\"rejected_queue_full\"}", m.rejected) +
           sample("kimi_requests_total{outcome=\"invalid\"}", invalid));
  line("kimi_queue_depth", "gauge", "Requests waiting for a slot.",
       sample("kimi_queue_depth", double(engine.queued())));
  line("kimi_requests_running", "gauge", "Requests being generated.",
       sample("kimi_requests_running", m.running));
  line("kimi_slots", "gauge", "Requests that can be generated at once.",
       sample("kimi_slots", engine.slots()));
  line("kimi_time_to_first_token_seconds", "summary",
       "From the request's arrival in the queue to its first generated token.",
       sample("kimi_time_to_first_token_seconds_sum", m.ttftMicros * 1e-6) +
           sample("kimi_time_to_first_token_seconds_count", m.ttftCount));
  line("kimi_inter_token_latency_seconds", "summary",
       "Between consecutive generated tokens of a request.",
       sample("kimi_inter_token_latency_seconds_sum", m.itlMicros * 1e-6) +
           sample("kimi_inter_token_latency_seconds_count", m.itlCount));
  line("kimi_prompt_tokens_total", "counter", "Prompt tokens of started requests.",
       sample("kimi_prompt_tokens_total", m.promptTokens));
  line("kimi_generation_tokens_total", "counter", "Tokens generated.",
       sample("kimi_generation_tokens_total", m.generatedTokens));
  line("kimi_generation_tokens_per_second", "gauge",
       "Tokens generated per second since the server started.",
       sample("kimi_generation_tokens_per_second",
              uptime > 0 ? double(m.generatedTokens) / uptime : 0.0));
  line("kimi_cache_bytes", "gauge",
       "Bytes of sequence state and caches the last finished request's session held at most.",
       sample("kimi_cache_bytes", m.sessionBytes));
  return out;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = parseArgs(argc, argv);
  // Client disconnects must not kill the server through SIGPIPE; SIGINT and
  // SIGTERM are taken by a thread that stops the server.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);

  StatusOr<ArtifactSpec> artifact = ArtifactReader::readFile(o.model);
  if (!artifact)
    die(artifact.status().message());
  auto spec = std::make_shared<const ArtifactSpec>(std::move(*artifact));
  if (spec->target.numRanks != 1)
    die("the artifact is partitioned over " + std::to_string(spec->target.numRanks) +
        " ranks; kimi-serve runs one-rank artifacts");
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::load(o.tokenizer);
  if (!tokenizer)
    die(tokenizer.status().message());

  StatusOr<std::unique_ptr<WeightLoader>> loader =
      o.randomSeed >= 0
          ? openRandomWeights(*spec, static_cast<uint64_t>(o.randomSeed), "")
          : WeightLoader::open(o.weights);
  if (!loader)
    die(loader.status().message());
  StatusOr<std::shared_ptr<Executable>> exe =
      createExecutable(spec, **loader, nullptr, static_cast<int>(o.device));
  if (!exe)
    die(exe.status().message());

  ServedModel model;
  model.name = o.servedName;
  model.tokenizer = tokenizer->get();
  model.vocab = spec->model.vocabSize;
  model.maxPositions = spec->model.maxPositions;
  model.eosTokens = modelEosTokens(spec->model);
  model.created = static_cast<int64_t>(std::time(nullptr));

  ServeEngine engine(*exe, static_cast<int>(o.slots), static_cast<size_t>(o.maxQueue));
  if (Status s = engine.start(); !s.isOk())
    die(s.message());

  httplib::Server server;
  // Handlers wait for their slot: enough threads for every slot, the whole
  // queue and the light endpoints.
  const size_t threads = static_cast<size_t>(o.slots + o.maxQueue + 8);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(static_cast<size_t>(o.maxBody));
  std::atomic<int64_t> invalid{0}, nextId{0};
  const Clock::time_point startTime = Clock::now();

  server.Get("/health", [](const httplib::Request &, httplib::Response &res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/v1/models", [&](const httplib::Request &, httplib::Response &res) {
    res.set_content(modelsJson(model), "application/json");
  });
  server.Get("/metrics", [&](const httplib::Request &, httplib::Response &res) {
    const double uptime = std::chrono::duration<double>(Clock::now() - startTime).count();
    res.set_content(metricsText(engine, invalid, uptime), "text/plain; version=0.0.4");
  });
  auto serve = [&](Endpoint endpoint) {
    return [&, endpoint](const httplib::Request &req, httplib::Response &res) {
      ApiRequest api;
      ApiError error;
      if (!parseRequest(endpoint, req.body, model, api, error)) {
        ++invalid;
        return replyError(res, error);
      }
      auto job = std::make_shared<Job>();
      job->prompt = api.prompt;
      job->options = api.options;
      job->tokenizer = model.tokenizer;
      if (!engine.submit(job)) {
        ApiError full;
        full.status = 429;
        full.type = "rate_limit_error";
        full.message = "the server's queue is full (" + std::to_string(engine.maxQueue()) +
                       " requests waiting): retry later";
        return replyError(res, full);
      }
      const std::string id = std::string(endpoint == Endpoint::kChatCompletions
                                             ? "chatcmpl-"
                                             : "cmpl-") +
                             std::to_string(nextId++);
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      if (!api.stream) {
        std::unique_lock<std::mutex> lock(job->mutex);
        job->changed.wait(lock, [&] { return job->done; });
        if (!job->status.isOk()) {
          ApiError failed;
          failed.status = 500;
          failed.type = "server_error";
          failed.message = job->status.message();
          return replyError(res, failed);
        }
        res.set_content(responseJson(api, model, id, created, job->result),
                        "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [job, api, id, created, &model, first = true](size_t,
                                                        httplib::DataSink &sink) mutable {
            std::unique_lock<std::mutex> lock(job->mutex);
            job->changed.wait_for(lock, std::chrono::milliseconds(200),
                                  [&] { return !job->pending.empty() || job->done; });
            std::string text;
            text.swap(job->pending);
            std::vector<int32_t> tokens;
            tokens.swap(job->pendingTokens);
            const bool done = job->done, started = job->started;
            lock.unlock();
            auto send = [&](const std::string &s) { return sink.write(s.data(), s.size()); };
            if (!text.empty() || !tokens.empty() || (first && started)) {
              if (!send(streamChunk(api, model, id, created, text, tokens, nullptr, first,
                                    nullptr)))
                return false;
              first = false;
            }
            if (done) {
              if (!job->status.isOk()) {
                ApiError failed;
                failed.status = 500;
                failed.type = "server_error";
                failed.message = job->status.message();
                send("data: " + failed.body() + "\n\n");
              } else {
                send(streamChunk(api, model, id, created, "", {},
                                 finishReason(job->result.reason), first, &job->result));
              }
              send("data: [DONE]\n\n");
              sink.done();
            }
            return true;
          },
          [job](bool success) {
            // A client gone mid-stream: stop generating, free the slot.
            if (!success)
              job->cancelled = true;
          });
    };
  };
  server.Post("/v1/completions", serve(Endpoint::kCompletions));
  server.Post("/v1/chat/completions", serve(Endpoint::kChatCompletions));
  server.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
    if (!res.body.empty())
      return;
    ApiError e;
    e.status = res.status;
    e.type = res.status == 404 ? "not_found_error" : "invalid_request_error";
    e.message = res.status == 404   ? "no endpoint " + req.method + " " + req.path
                : res.status == 413 ? "the request body is too large"
                                    : "the request was refused (HTTP " +
                                          std::to_string(res.status) + ")";
    res.set_content(e.body(), "application/json");
  });

  int port = static_cast<int>(o.port);
  if (port == 0)
    port = server.bind_to_any_port(o.host);
  else if (!server.bind_to_port(o.host, port))
    port = -1;
  if (port <= 0)
    die("cannot listen on " + o.host + ":" + std::to_string(o.port));
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stopSignals, &sig);
    server.stop();
  });
  std::printf("kimi-serve: listening on http://%s:%d (model '%s', %lld slot%s, queue %lld)\n",
              o.host.c_str(), port, model.name.c_str(), o.slots, o.slots == 1 ? "" : "s",
              o.maxQueue);
  std::fflush(stdout);
  const bool listened = server.listen_after_bind();
  if (stopper.joinable()) {
    // Stopped by a signal, or the listen failed: end the waiting thread.
    pthread_kill(stopper.native_handle(), SIGTERM);
    stopper.join();
  }
  if (!listened)
    die("the server stopped with an error");
  std::printf("kimi-serve: stopped\n");
  return 0;
}
