//===- kimi-run.cpp - run a compiled model --------------------------------===//
//
// Loads a .kimi artifact and its weights, prefills a prompt (token ids, or
// text through a tokenizer) and generates, printing the tokens (and the
// text as it comes), throughput and memory. Built on the runtime alone (no
// LLVM/MLIR).
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/reader.h"
#include "runtime/comm/communicator.h"
#ifdef KIMI_RUN_HAVE_MPI
#include "runtime/comm/mpi_communicator.h"
#endif
#include "runtime/comm/rank_connection.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/session/session.h"
#include "runtime/support/file_io.h"
#include "runtime/text/chat_format.h"
#include "runtime/text/generate.h"
#include "runtime/text/sampler.h"
#include "runtime/text/tokenizer.h"
#include "runtime/weights/json.h"
#include "runtime/weights/random_weights.h"
#include "runtime/weights/weight_loader.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <random>
#include <string>
#include <type_traits>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace kimi::rt;

namespace {

const char *kUsage =
    "usage: kimi-run MODEL.kimi (--weights PATH... | --random-weights SEED)\n"
    "                (--prompt-ids 1,2,3 | --prompt-random N |\n"
    "                 --tokenizer DIR (--prompt TEXT | --chat TEXT [--system TEXT]))\n"
    "                [--max-new-tokens N] [sampling options] [--stop TEXT...]\n"
    "                [--save-weights FILE] [--dump-logits FILE] [--seed S]\n"
    "                [--allow-nonfinite]\n"
    "                [--rank R --store FILE] [--device D]\n"
    "\n"
    "Runs a model compiled by kimi-compile: prefills the prompt, then\n"
    "generates (greedily unless sampling options say otherwise) until the\n"
    "model's end-of-sequence token, a stop string or --max-new-tokens, and\n"
    "prints the generated tokens, prefill and decode tokens/s and peak memory.\n"
    "With a tokenizer the text is printed as it is generated.\n"
    "\n"
    "  --weights PATH        a .safetensors file, a model.safetensors.index.json\n"
    "                        (its shards, checked against it), or a directory\n"
    "                        holding either (repeatable)\n"
    "  --random-weights SEED deterministic random weights for every tensor\n"
    "                        of the artifact (demos and tests)\n"
    "  --allow-nonfinite     load --weights holding NaN or infinities (refused\n"
    "                        by default, naming the tensor and element)\n"
    "  --save-weights FILE   with --random-weights: keep them in FILE\n"
    "  --prompt-ids LIST     comma-separated token ids\n"
    "  --prompt-random N     N random token ids (from --seed, default 1)\n"
    "  --max-new-tokens N    tokens to generate at most (default 16)\n"
    "\n"
    "Text (docs/text.md):\n"
    "  --tokenizer DIR       tiktoken.model (+ tokenizer_config.json) of the\n"
    "                        model; the demo's is build/tokenizers/kimi-tiny\n"
    "  --prompt TEXT         the prompt as text (special-token text such as\n"
    "                        <|im_end|> becomes the token, as released)\n"
    "  --chat TEXT           a user message in the released chat format,\n"
    "                        with the default system prompt or --system TEXT;\n"
    "                        generation also ends at <|im_end|>\n"
    "  --stop TEXT           end generation when TEXT appears (not printed;\n"
    "                        repeatable; also across tokens)\n"
    "  --ignore-eos          do not end at the model's eos_token_id\n"
    "  --show-special        print special tokens (<|im_middle|>, reserved\n"
    "                        ids) in the text; they are left out by default\n"
    "\n"
    "Sampling (default greedy; --seed S seeds the draws, default 1):\n"
    "  --temperature T       0 is greedy (0 .. 100)\n"
    "  --top-k K             the K most likely tokens (0: all)\n"
    "  --top-p P             the most likely tokens up to mass P (0 < P <= 1)\n"
    "  --min-p P             tokens at least P times the most likely's\n"
    "  --presence-penalty X  lowers generated tokens' logits by X (-2 .. 2)\n"
    "  --frequency-penalty X lowers them by X per occurrence (-2 .. 2)\n"
    "\n"
    "  --dump-logits FILE    write every logits row (prompt rows, then one\n"
    "                        per generated token) as raw little-endian f32\n"
    "                        (through a temporary file renamed over FILE\n"
    "                        when the run succeeds, as --save-weights)\n"
    "\n"
    "  --device D            CUDA device of a GPU model (default: the rank,\n"
    "                        so one process per GPU of one host)\n"
    "\n"
    "KIMI_GPU_PROFILE=1 in the environment prints a GPU model's device time\n"
    "per kernel (all entry calls) on stderr at the end. A GPU model replays\n"
    "decode steps as CUDA graphs (KIMI_GPU_GRAPHS=0: direct launches;\n"
    "KIMI_GPU_GRAPH_BUCKET=N: cache rows per graph, default 256; see\n"
    "docs/runtime-abi.md, \"Decode graphs\").\n"
    "\n"
    "A partitioned artifact (kimi-compile --grid N --strategy ...) runs as N\n"
    "processes, one rank each. CPU ranks talk through MPI:\n"
    "  mpirun -np N kimi-run MODEL.kimi ...\n"
    "GPU ranks (--target sm_90a) talk through NCCL (libnccl.so.2, or the\n"
    "library KIMI_NCCL_LIBRARY names); start each with its rank and a file\n"
    "every rank can see, which rank 0 creates (remove it before a run):\n"
    "  kimi-run MODEL.kimi --rank R --store /tmp/kimi-nccl-id ...\n"
    "  --rank R              this process's rank, 0 .. N-1 (GPU models)\n"
    "  --store FILE          where the ranks meet (NCCL's unique id)\n"
    "Rank 0 prints and writes --dump-logits; every rank computes the same\n"
    "logits.\n"
    "  --comm-timeout S      CPU ranks: a collective still waiting after S\n"
    "                        seconds (a rank died or stopped) ends this rank\n"
    "                        with an error naming it and the collective, and\n"
    "                        mpirun ends the others (default 60; 0: forever)\n"
    "\n"
    "Several sequences: an artifact compiled with --batch B steps B sequences\n"
    "together, and with data parallelism (--strategy dp over D groups) each\n"
    "group steps its own. Sequence s (0 .. D*B-1) gets the random prompt of\n"
    "seed S + s (--prompt-ids: the same prompt for every sequence) and draws\n"
    "with seed S + s; rank 0 prints 'generated[s]:' per sequence, and\n"
    "--dump-logits holds sequence 0's rows, then sequence 1's, and so on.\n"
    "Several sequences always run --max-new-tokens steps; text, --stop and\n"
    "the end-of-sequence token need a one-sequence artifact.\n";

int fail(const std::string &message) {
  std::fprintf(stderr, "kimi-run: error: %s\n", message.c_str());
  return 1;
}

bool parseInt(const std::string &text, long long &out) {
  if (text.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  out = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

/// Prints "weights: N/M tensors, X/Y GiB" over itself on a terminal, at
/// most ten times a second and once at the end.
class LoadProgressLine {
public:
  explicit LoadProgressLine(const WeightLoader &loader)
      : total_(loader.checkpointTotals()), enabled_(isatty(STDERR_FILENO)) {}
  void operator()(const WeightLoader::Progress &p) {
    if (!enabled_)
      return;
    auto now = std::chrono::steady_clock::now();
    bool last = p.tensors >= total_.tensors;
    if (!last && now - lastPrint_ < std::chrono::milliseconds(100))
      return;
    lastPrint_ = now;
    std::fprintf(stderr, "\rweights: %lld/%lld tensors, %.2f/%.2f GiB%s",
                 (long long)p.tensors, (long long)total_.tensors,
                 p.bytes / 1073741824.0, total_.bytes / 1073741824.0,
                 last ? "\n" : "");
    std::fflush(stderr);
    printed_ = !last;
  }
  /// Ends an unfinished line (a load that stopped early or read less).
  void finish() {
    if (printed_)
      std::fputc('\n', stderr);
    printed_ = false;
  }

private:
  WeightLoader::Progress total_;
  bool enabled_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point lastPrint_{};
};

/// All-gathers `mine` into `all` (size() x as long). NCCL works on device
/// buffers: with `device` the data travels through it.
template <typename T>
Status gatherAll(Communicator *comm, const CudaDevice *device,
                 const std::vector<T> &mine, std::vector<T> &all) {
  if (!device)
    return comm->allGather(mine, all);
  const size_t in = mine.size() * sizeof(T), out = all.size() * sizeof(T);
  KIMI_ASSIGN_OR_RETURN(DeviceBuffer send, DeviceBuffer::allocate(*device, in + 1));
  KIMI_ASSIGN_OR_RETURN(DeviceBuffer recv, DeviceBuffer::allocate(*device, out + 1));
  KIMI_RETURN_IF_ERROR(send.upload(mine.data(), in));
  const CommDType type = sizeof(T) == 8 ? CommDType::kI64
                         : std::is_floating_point_v<T> ? CommDType::kF32
                                                       : CommDType::kI32;
  KIMI_RETURN_IF_ERROR(comm->allGather(
      ConstCommBuffer(reinterpret_cast<const void *>(send.address()),
                      mine.size(), type),
      CommBuffer{reinterpret_cast<void *>(recv.address()), all.size(), type}));
  return recv.download(all.data(), out);
}


/// The command line.
struct RunOptions {
  std::string model, saveWeights, dumpLogits, promptIds, store;
  std::string tokenizer, promptText, chatText, systemText;
  bool systemGiven = false, ignoreEos = false, showSpecial = false;
  std::vector<std::string> stops;
  SamplingParams sampling;
  std::vector<std::string> weightArgs;
  long long randomSeed = -1, promptRandom = 0, maxNew = 16, seed = 1;
  long long rank = -1, device = -1;
  double commTimeout = 60;
  bool commTimeoutGiven = false;
  bool help = false, allowNonFinite = false;
};

/// Whether `a` and `b` name one existing file (or are the same path).
bool sameFile(const std::string &a, const std::string &b) {
  struct stat sa, sb;
  if (a == b)
    return true;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 &&
         sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/// The outputs never write over an input of the run, or over each other.
Status checkOutputs(const RunOptions &o) {
  std::vector<std::pair<std::string, std::string>> inputs = {{"the artifact", o.model}};
  for (const std::string &w : o.weightArgs)
    inputs.push_back({"--weights", w});
  for (auto [flag, path] : {std::pair<const char *, std::string>{"--save-weights", o.saveWeights},
                            {"--dump-logits", o.dumpLogits}}) {
    if (path.empty())
      continue;
    for (const auto &[what, input] : inputs)
      if (sameFile(path, input))
        return invalidArgument(std::string(flag) + " '" + path + "' is " + what +
                               " '" + input + "': kimi-run never writes over "
                               "its inputs");
  }
  if (!o.saveWeights.empty() && !o.dumpLogits.empty() &&
      sameFile(o.saveWeights, o.dumpLogits))
    return invalidArgument("--save-weights and --dump-logits name one file '" +
                           o.dumpLogits + "'");
  return Status::ok();
}

/// Parses argv; an error names the option at fault.
StatusOr<RunOptions> parseArgs(int argc, char **argv) {
  RunOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    auto number = [&](long long &out) {
      std::string v;
      return value(v) && parseInt(v, out);
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    } else if (a == "--weights") {
      if (!value(v))
        return invalidArgument("--weights needs a path");
      o.weightArgs.push_back(v);
    } else if (a == "--comm-timeout") {
      if (!value(v))
        return invalidArgument("--comm-timeout needs seconds");
      char *end = nullptr;
      o.commTimeout = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(o.commTimeout >= 0) || o.commTimeout > 1e6)
        return invalidArgument("--comm-timeout '" + v +
                               "': expected seconds, 0 .. 1000000 (0: wait forever)");
      o.commTimeoutGiven = true;
    } else if (a == "--allow-nonfinite") {
      o.allowNonFinite = true;
    } else if (a == "--random-weights") {
      if (!number(o.randomSeed) || o.randomSeed < 0)
        return invalidArgument("--random-weights needs a non-negative integer seed");
    } else if (a == "--save-weights") {
      if (!value(o.saveWeights))
        return invalidArgument("--save-weights needs a file");
    } else if (a == "--prompt-ids") {
      if (!value(o.promptIds))
        return invalidArgument("--prompt-ids needs a list like 1,2,3");
    } else if (a == "--prompt-random") {
      if (!number(o.promptRandom) || o.promptRandom < 1)
        return invalidArgument("--prompt-random needs a positive count");
    } else if (a == "--max-new-tokens") {
      if (!number(o.maxNew) || o.maxNew < 0)
        return invalidArgument("--max-new-tokens needs a non-negative count");
    } else if (a == "--seed") {
      if (!number(o.seed))
        return invalidArgument("--seed needs an integer");
    } else if (a == "--rank") {
      if (!number(o.rank) || o.rank < 0)
        return invalidArgument("--rank needs a non-negative integer");
    } else if (a == "--store") {
      if (!value(o.store))
        return invalidArgument("--store needs a file");
    } else if (a == "--device") {
      if (!number(o.device) || o.device < 0)
        return invalidArgument("--device needs a CUDA device ordinal");
    } else if (a == "--dump-logits") {
      if (!value(o.dumpLogits))
        return invalidArgument("--dump-logits needs a file");
    } else if (a == "--tokenizer") {
      if (!value(o.tokenizer))
        return invalidArgument("--tokenizer needs a directory");
    } else if (a == "--prompt") {
      if (!value(o.promptText))
        return invalidArgument("--prompt needs text");
      if (o.promptText.empty())
        return invalidArgument("--prompt: the text is empty");
    } else if (a == "--chat") {
      if (!value(o.chatText))
        return invalidArgument("--chat needs text");
    } else if (a == "--system") {
      if (!value(o.systemText))
        return invalidArgument("--system needs text");
      o.systemGiven = true;
    } else if (a == "--stop") {
      if (!value(v) || v.empty())
        return invalidArgument("--stop needs a non-empty text");
      o.stops.push_back(v);
    } else if (a == "--ignore-eos") {
      o.ignoreEos = true;
    } else if (a == "--show-special") {
      o.showSpecial = true;
    } else if (a == "--top-k") {
      long long k;
      if (!number(k) || k < 0)
        return invalidArgument("--top-k needs a count (0: all tokens)");
      o.sampling.topK = k;
    } else if (a == "--temperature" || a == "--top-p" || a == "--min-p" ||
               a == "--presence-penalty" || a == "--frequency-penalty") {
      if (!value(v))
        return invalidArgument(a + " needs a number");
      char *end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end)
        return invalidArgument(a + " '" + v + "' is not a number");
      (a == "--temperature"        ? o.sampling.temperature
       : a == "--top-p"            ? o.sampling.topP
       : a == "--min-p"            ? o.sampling.minP
       : a == "--presence-penalty" ? o.sampling.presencePenalty
                                   : o.sampling.frequencyPenalty) = x;
    } else if (!a.empty() && a[0] == '-') {
      return invalidArgument("unknown option '" + a + "' (see --help)");
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      return invalidArgument("more than one model given: '" + o.model +
                             "' and '" + a + "'");
    }
  }
  if (o.model.empty())
    return invalidArgument("no model given (see --help)");
  if (o.weightArgs.empty() == (o.randomSeed < 0))
    return invalidArgument("give exactly one of --weights and --random-weights");
  if (!o.saveWeights.empty() && o.randomSeed < 0)
    return invalidArgument("--save-weights keeps --random-weights in a file; "
                           "with --weights the weights are files already");
  KIMI_RETURN_IF_ERROR(checkOutputs(o));
  const int prompts = !o.promptIds.empty() + (o.promptRandom != 0) +
                      !o.promptText.empty() + !o.chatText.empty();
  if (prompts != 1)
    return invalidArgument("give exactly one of --prompt-ids, --prompt-random, "
                           "--prompt and --chat");
  if ((!o.promptText.empty() || !o.chatText.empty()) && o.tokenizer.empty())
    return invalidArgument(std::string(o.chatText.empty() ? "--prompt" : "--chat") +
                           " needs --tokenizer DIR");
  if (o.systemGiven && o.chatText.empty())
    return invalidArgument("--system goes with --chat");
  if (!o.stops.empty() && o.tokenizer.empty())
    return invalidArgument("--stop needs --tokenizer DIR (stop strings are text)");
  if (o.showSpecial && o.tokenizer.empty())
    return invalidArgument("--show-special needs --tokenizer DIR");
  if (Status s = validateSamplingParams(o.sampling); !s.isOk())
    return s;
  return o;
}

/// "1,2,3" as token ids.
StatusOr<std::vector<int32_t>> parsePromptIds(const std::string &text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(
        at, comma == std::string::npos ? std::string::npos : comma - at);
    long long id;
    if (!parseInt(item, id) || id < INT32_MIN || id > INT32_MAX)
      return invalidArgument("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(id));
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  return ids;
}

/// The weights: the --weights files, or random ones written to
/// --save-weights or a temporary file (unlinked once mapped).
StatusOr<std::unique_ptr<WeightLoader>> openWeights(const ArtifactSpec &spec,
                                                    const RunOptions &o) {
  if (o.randomSeed < 0)
    return WeightLoader::open(o.weightArgs);
  return openRandomWeights(spec, static_cast<uint64_t>(o.randomSeed), o.saveWeights);
}

/// What a run produced on this rank: each of its B sequences' greedy
/// tokens and (with --dump-logits) logits rows.
struct Generation {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> rows;
};

/// Prefills `prompt` (B sequences' tokens, one after the other) and
/// generates `maxNew` tokens a sequence into `g` (sequence b draws with
/// seed firstSeed + b), which keeps what was generated before an error.
Status generateBatch(Session &s, const std::vector<int32_t> &prompt,
                     long long maxNew, bool keepRows, const SamplingParams &sampling,
                     uint64_t firstSeed, Generation &g) {
  const int64_t B = s.batch();
  std::vector<Sampler> samplers;
  for (int64_t b = 0; b < B; ++b) {
    SamplingParams p = sampling;
    p.seed = firstSeed + static_cast<uint64_t>(b);
    samplers.emplace_back(p);
  }
  auto draw = [&](int64_t b, const float *row, int64_t vocab) -> Status {
    KIMI_ASSIGN_OR_RETURN(int32_t t, samplers[b].sample(row, vocab));
    samplers[b].accept(t);
    g.tokens[b].push_back(t);
    return Status::ok();
  };
  g.tokens.resize(size_t(B));
  g.rows.resize(size_t(B));
  auto keep = [&](const LogitsView &l) {
    const int64_t per = l.rows / B;
    if (keepRows)
      for (int64_t b = 0; b < B; ++b)
        g.rows[b].insert(g.rows[b].end(), l.data + b * per * l.vocab,
                         l.data + (b + 1) * per * l.vocab);
  };
  // Generation needs only each prompt's last logits row; --dump-logits all.
  KIMI_ASSIGN_OR_RETURN(LogitsView logits,
                        s.prefill(prompt, keepRows ? PrefillLogits::kAll
                                                   : PrefillLogits::kLast));
  keep(logits);
  if (maxNew > 0) {
    const int64_t perSequence = logits.rows / B; // the prompt length, or 1
    for (int64_t b = 0; b < B; ++b)
      KIMI_RETURN_IF_ERROR(draw(
          b, logits.data + ((b + 1) * perSequence - 1) * logits.vocab, logits.vocab));
  }
  std::vector<int32_t> next(static_cast<size_t>(B));
  while (static_cast<long long>(g.tokens[0].size()) < maxNew) {
    for (int64_t b = 0; b < B; ++b)
      next[b] = g.tokens[b].back();
    KIMI_ASSIGN_OR_RETURN(LogitsView step, s.decode(next.data(), next.size()));
    keep(step);
    for (int64_t b = 0; b < B; ++b)
      KIMI_RETURN_IF_ERROR(draw(b, step.data + b * step.vocab, step.vocab));
  }
  return Status::ok();
}

/// Prints every sequence's tokens (rank 0 gathers the data-parallel groups'
/// first) and writes their logits rows to `dump` when open; returns the
/// rows written.
StatusOr<int64_t> printSequences(const Generation &g, const ArtifactSpec &spec,
                                 const RankConnection &ranks, int64_t B,
                                 bool keepRows, OutputFile *dump) {
  // Every rank holds as many rows and tokens (same prompt length and steps).
  std::vector<int32_t> allTokens;
  std::vector<float> allRows;
  for (int64_t b = 0; b < B; ++b) {
    allTokens.insert(allTokens.end(), g.tokens[b].begin(), g.tokens[b].end());
    allRows.insert(allRows.end(), g.rows[b].begin(), g.rows[b].end());
  }
  const int32_t groups = spec.target.dataParallel;
  int perGroup = 1;
  if (groups > 1) {
    const int n = ranks.comm->size();
    perGroup = n / groups;
    std::vector<int32_t> myTokens = std::move(allTokens);
    std::vector<float> myRows = std::move(allRows);
    allTokens.resize(myTokens.size() * size_t(n));
    allRows.resize(myRows.size() * size_t(n));
    Status s = gatherAll(ranks.comm.get(), ranks.device.get(), myTokens, allTokens);
    if (s.isOk() && keepRows)
      s = gatherAll(ranks.comm.get(), ranks.device.get(), myRows, allRows);
    if (!s.isOk())
      return s.addContext("gathering the data-parallel groups' results");
  }
  const int64_t sequences = int64_t(groups) * B, vocab = spec.model.vocabSize;
  const size_t tokensPer = g.tokens[0].size(), rowsPer = g.rows[0].size();
  int64_t dumpedRows = 0;
  for (int64_t seq = 0; seq < sequences; ++seq) {
    // Sequence seq = group * B + b, held by the group's first rank.
    const size_t holder = size_t(seq / B) * size_t(perGroup), b = size_t(seq % B);
    const size_t at = holder * size_t(B) + b;
    if (dump)
      KIMI_RETURN_IF_ERROR(dump->write(allRows.data() + at * rowsPer,
                                       rowsPer * sizeof(float)));
    dumpedRows += static_cast<int64_t>(rowsPer) / vocab;
    if (sequences == 1)
      std::printf("generated:");
    else
      std::printf("generated[%lld]:", (long long)seq);
    for (size_t i = 0; i < tokensPer; ++i)
      std::printf(" %d", allTokens[at * tokensPer + i]);
    std::printf("\n");
  }
  return dumpedRows;
}

void printCounters(const SessionCounters &c) {
  std::printf("prefill: %lld tokens in %.4f s (%.1f tokens/s)\n",
              (long long)c.prefillTokens, c.prefillSeconds,
              c.prefillSeconds > 0 ? c.prefillTokens / c.prefillSeconds : 0.0);
  std::printf("decode: %lld tokens in %.4f s (%.1f tokens/s)\n",
              (long long)c.decodeTokens, c.decodeSeconds,
              c.decodeSeconds > 0 ? c.decodeTokens / c.decodeSeconds : 0.0);
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  std::printf("memory: session state peak %.2f MiB, process peak RSS %.1f MiB\n",
              c.peakBytes / 1048576.0, usage.ru_maxrss / 1024.0);
}

/// The prompts of the B sequences this rank's session steps (sequence-
/// major): --prompt-ids for each, or sequence s's random prompt of seed
/// --seed + s, s counted over the data-parallel groups.
std::vector<int32_t> sessionPrompts(const RunOptions &o,
                                    const std::vector<int32_t> &promptList,
                                    int32_t group, int64_t B, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int64_t b = 0; b < B; ++b) {
    if (!promptList.empty()) {
      tokens.insert(tokens.end(), promptList.begin(), promptList.end());
      continue;
    }
    std::mt19937_64 rng(static_cast<uint64_t>(o.seed + group * B + b));
    for (long long i = 0; i < o.promptRandom; ++i)
      tokens.push_back(static_cast<int32_t>(rng() % uint64_t(vocab)));
  }
  return tokens;
}

} // namespace

int main(int argc, char **argv) {
  StatusOr<RunOptions> parsed = parseArgs(argc, argv);
  if (!parsed.isOk())
    return fail(parsed.status().message());
  const RunOptions &o = parsed.value();
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  StatusOr<ArtifactSpec> artifact = ArtifactReader::readFile(o.model);
  if (!artifact.isOk())
    return fail(artifact.status().message());
  auto spec = std::make_shared<const ArtifactSpec>(std::move(artifact.value()));
  const int64_t vocab = spec->model.vocabSize;

  const bool gpuModel = spec->target.kind == TargetKind::kSm90a;
  if (!gpuModel && (o.rank >= 0 || !o.store.empty() || o.device >= 0))
    return fail("--rank, --store and --device apply to GPU models; CPU ranks "
                "run under mpirun");
  if ((o.rank >= 0) != !o.store.empty())
    return fail("--rank and --store go together (see --help)");
  if (o.rank >= 0 && spec->target.numRanks == 1)
    return fail("--rank: the artifact is not partitioned (1 rank)");
  // Partitioned: one process per rank, through NCCL (GPU models) or MPI.
  RankOptions rankOptions;
  rankOptions.rank = int32_t(o.rank);
  rankOptions.store = o.store;
  rankOptions.device = int(o.device);
#ifdef KIMI_RUN_HAVE_MPI
  rankOptions.hostCommunicator =
      []() -> StatusOr<std::unique_ptr<Communicator>> {
    KIMI_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi,
                          MpiCommunicator::create());
    return std::unique_ptr<Communicator>(std::move(mpi));
  };
#endif
  StatusOr<RankConnection> connected = connectRanks(*spec, rankOptions);
  if (!connected.isOk())
    return fail(connected.status().message() +
                (gpuModel ? " (start one process per rank with --rank R "
                            "--store FILE; see --help)"
                          : " (run the ranks under mpirun)"));
  RankConnection &ranks = connected.value();
  // A dead or stopped rank: the others give up after --comm-timeout (armed
  // once the session exists, below: loading weights may take the ranks
  // unequal times). The watchdog sees host collectives (MPI); NCCL's are
  // enqueued on streams, and a stuck one shows in a stream wait it does not
  // see.
  if ((!ranks.comm || gpuModel) && o.commTimeoutGiven)
    return fail(gpuModel ? "--comm-timeout applies to CPU ranks under mpirun; "
                           "GPU ranks (NCCL) have no dead-rank detection yet"
                         : "--comm-timeout applies to partitioned artifacts "
                           "(this one runs as 1 rank)");
  const bool quiet = ranks.comm && ranks.comm->rank() != 0;
  // Data parallelism: this rank's group serves its own sequences.
  const int32_t group =
      ranks.comm ? spec->target.dataParallelGroup(ranks.comm->rank()) : 0;

  std::vector<int32_t> promptList;
  if (!o.promptIds.empty()) {
    StatusOr<std::vector<int32_t>> ids = parsePromptIds(o.promptIds);
    if (!ids.isOk())
      return fail(ids.status().message());
    promptList = std::move(ids.value());
  }
  // Text: read before the weights, so a bad tokenizer or prompt costs no load.
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> stopTokens;
  if (!o.tokenizer.empty()) {
    StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::load(o.tokenizer);
    if (!loaded)
      return fail(loaded.status().message());
    tokenizer = std::move(*loaded);
    Status encoded = Status::ok();
    if (!o.promptText.empty()) {
      encoded = tokenizer->encode(o.promptText, SpecialText::kRecognize, promptList);
    } else if (!o.chatText.empty()) {
      ChatOptions chat;
      if (o.systemGiven)
        chat.defaultSystemPrompt = o.systemText;
      encoded = encodeChat(*tokenizer, {{"user", o.chatText, ""}}, chat, promptList);
      if (encoded.isOk())
        stopTokens.push_back(*chatEndToken(*tokenizer));
    }
    if (!encoded.isOk())
      return fail((o.chatText.empty() ? "--prompt: " : "--chat: ") + encoded.message());
  }
  if (!o.ignoreEos)
    for (int32_t id : modelEosTokens(spec->model))
      stopTokens.push_back(id);

  // Rank 0 writes the random weights (and --dump-logits).
  RunOptions weightOptions = o;
  if (quiet)
    weightOptions.saveWeights.clear();
  StatusOr<std::unique_ptr<WeightLoader>> loader = openWeights(*spec, weightOptions);
  if (!loader.isOk())
    return fail(loader.status().message());
  loader.value()->setAllowNonFinite(o.allowNonFinite);
  if (int64_t skipped = loader.value()->skippedTensors())
    std::fprintf(stderr,
                 "weights: skipping %lld vision tensors (vision_tower.*, "
                 "mm_projector.*): kimi runs the text model\n",
                 (long long)skipped);
  LoadProgressLine progressLine(*loader.value());
  loader.value()->setProgressCallback(
      [&](const WeightLoader::Progress &p) { progressLine(p); });
  StatusOr<std::shared_ptr<Executable>> exe =
      createExecutable(spec, *loader.value(), ranks.comm.get(),
                       ranks.deviceOrdinal);
  progressLine.finish();
  if (!exe.isOk())
    return fail(exe.status().message());
  StatusOr<std::unique_ptr<Session>> session = Session::create(exe.value());
  if (!session.isOk())
    return fail(session.status().message());
  Session &s = *session.value();
  if (ranks.comm && !gpuModel)
    ranks.comm->setTimeout(o.commTimeout);

  // Sequences: this session steps B of them; with data parallelism rank r
  // serves sequences group * B .. group * B + B - 1 of the whole batch.
  const int64_t B = s.batch();
  const int64_t sequences = int64_t(spec->target.dataParallel) * B;
  if (sequences > 1 && (tokenizer || !o.stops.empty()))
    return fail("--tokenizer, --prompt, --chat and --stop need a one-sequence "
                "artifact; this one steps " + std::to_string(sequences) +
                " sequences");
  const std::vector<int32_t> tokens =
      sessionPrompts(o, promptList, group, B, vocab);
  const int64_t promptLength = static_cast<int64_t>(tokens.size()) / B;

  // Written to a temporary file, renamed over --dump-logits at the end.
  std::unique_ptr<OutputFile> dump;
  if (!quiet && !o.dumpLogits.empty()) {
    StatusOr<std::unique_ptr<OutputFile>> created = OutputFile::create(o.dumpLogits);
    if (!created.isOk())
      return fail("--dump-logits: " + created.status().message());
    dump = std::move(created.value());
  }
  if (quiet && !std::freopen("/dev/null", "w", stdout))
    return fail("cannot silence stdout of rank " +
                std::to_string(ranks.comm->rank()));
  std::printf("model: %s, %d layers (%s), vocab %lld, target %s\n",
              spec->model.modelType.c_str(), spec->model.numLayers,
              spec->model.layerKinds.c_str(), (long long)vocab,
              spec->target.name().c_str());
  if (ranks.comm)
    std::printf("ranks: %d (%s)\n", ranks.comm->size(),
                ranks.comm->backendName());
  std::printf("weights: %.1f MiB loaded in %.3f s\n",
              exe.value()->weightBytes() / 1048576.0,
              exe.value()->weightLoadSeconds());
  std::printf("prompt: %lld tokens", (long long)promptLength);
  if (sequences > 1)
    std::printf(" per sequence, %lld sequences", (long long)sequences);
  std::printf("\n");

  const bool keepRows = !o.dumpLogits.empty();
  Status written = Status::ok();
  int64_t dumpedRows = 0;
  if (sequences == 1) {
    // One sequence: the runtime's generation loop, stop tokens and strings,
    // the text streamed as it becomes final.
    GenerateOptions g;
    g.sampling = o.sampling;
    g.sampling.seed = static_cast<uint64_t>(o.seed);
    g.maxNewTokens = o.maxNew;
    g.stopTokens = stopTokens;
    g.stopStrings = o.stops;
    g.showSpecialTokens = o.showSpecial;
    std::vector<float> rows;
    if (keepRows) {
      g.prefillRows = PrefillLogits::kAll;
      g.onLogits = [&](const LogitsView &l) {
        rows.insert(rows.end(), l.data, l.data + l.rows * l.vocab);
      };
    }
    if (tokenizer) {
      std::printf("text: ");
      std::fflush(stdout);
    }
    GenerateResult result;
    Status ran = generate(
        s, tokenizer.get(), tokens, g,
        [&](int32_t, std::string_view text) {
          if (tokenizer && !text.empty()) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
          }
          return true;
        },
        result);
    if (tokenizer)
      std::printf("\n");
    if (!ran.isOk()) {
      // What was generated before the error is printed (no logits file).
      if (!result.tokens.empty()) {
        std::printf("generated before the error:");
        for (int32_t t : result.tokens)
          std::printf(" %d", t);
        std::printf("\n");
      }
      std::fflush(stdout);
      return fail(ran.message());
    }
    std::printf("generated:");
    for (int32_t t : result.tokens)
      std::printf(" %d", t);
    std::printf("\n");
    std::printf("stop: %s", stopReasonName(result.reason));
    if (result.reason == StopReason::kStopToken)
      std::printf(" (token %d)", result.tokens.back());
    if (result.reason == StopReason::kStopString)
      std::printf(" (\"%s\")", result.stopString.c_str());
    std::printf("\n");
    if (dump) {
      written = dump->write(rows.data(), rows.size() * sizeof(float));
      dumpedRows = static_cast<int64_t>(rows.size()) / vocab;
    }
  } else {
    Generation generated;
    Status ran = generateBatch(s, tokens, o.maxNew, keepRows, o.sampling,
                               static_cast<uint64_t>(o.seed + group * B), generated);
    if (!ran.isOk()) {
      // What was generated before the error is printed (each sequence's
      // tokens so far; no logits file is written).
      for (int64_t b = 0; b < B && !quiet; ++b) {
        if (generated.tokens[b].empty())
          continue;
        std::printf(B == 1 ? "generated before the error:"
                           : "generated[%lld] before the error:", (long long)b);
        for (int32_t t : generated.tokens[b])
          std::printf(" %d", t);
        std::printf("\n");
      }
      std::fflush(stdout);
      return fail(ran.message());
    }
    StatusOr<int64_t> printed =
        printSequences(generated, *spec, ranks, B, keepRows, dump.get());
    if (printed)
      dumpedRows = *printed;
    else
      written = printed.takeStatus();
  }
  // Every write is checked, the last ones (buffered) at the commit.
  if (dump && written.isOk())
    written = dump->commit();
  if (!written.isOk())
    return fail("--dump-logits '" + o.dumpLogits + "': " + written.message());
  printCounters(s.counters());
  if (dump)
    std::printf("logits: %lld rows x %lld written to %s\n",
                (long long)dumpedRows, (long long)vocab,
                o.dumpLogits.c_str());
  // KIMI_GPU_PROFILE=1: the GPU model's per-kernel device times.
  if (std::string profile = exe.value()->profileReport(); !profile.empty())
    std::fprintf(stderr, "%s", profile.c_str());
  if (ranks.comm) {
    // The executable talks to the communicator until it is gone.
    session.value().reset();
    exe.value().reset();
    ranks.comm.reset();
#ifdef KIMI_RUN_HAVE_MPI
    if (!gpuModel) {
      Status finalized = MpiCommunicator::finalize();
      if (!finalized.isOk())
        return fail(finalized.message());
    }
#endif
  }
  return 0;
}
