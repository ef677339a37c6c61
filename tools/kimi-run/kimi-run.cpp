//===- kimi-run.cpp - run a compiled model --------------------------------===//
//
// Loads a .kimi artifact and its weights, prefills a prompt and decodes
// greedily, printing the tokens, throughput and memory. Built on the runtime
// alone (no LLVM/MLIR).
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/reader.h"
#include "runtime/comm/communicator.h"
#ifdef KIMI_RUN_HAVE_MPI
#include "runtime/comm/mpi_communicator.h"
#endif
#include "runtime/comm/nccl_communicator.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/session/session.h"
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
    "                [--prompt-ids 1,2,3 | --prompt-random N] "
    "[--max-new-tokens N]\n"
    "                [--save-weights FILE] [--dump-logits FILE] [--seed S]\n"
    "                [--rank R --store FILE] [--device D]\n"
    "\n"
    "Runs a model compiled by kimi-compile: prefills the prompt, then decodes\n"
    "greedily, and prints the generated tokens, prefill and decode tokens/s\n"
    "and peak memory.\n"
    "\n"
    "  --weights PATH        a .safetensors file, a model.safetensors.index.json\n"
    "                        (its shards, checked against it), or a directory\n"
    "                        holding either (repeatable)\n"
    "  --random-weights SEED deterministic random weights for every tensor\n"
    "                        of the artifact (demos and tests)\n"
    "  --save-weights FILE   with --random-weights: keep them in FILE\n"
    "  --prompt-ids LIST     comma-separated token ids\n"
    "  --prompt-random N     N random token ids (from --seed, default 1)\n"
    "  --max-new-tokens N    tokens to generate (default 16)\n"
    "  --dump-logits FILE    write every logits row (prompt rows, then one\n"
    "                        per generated token) as raw little-endian f32\n"
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
    "\n"
    "Several sequences: an artifact compiled with --batch B steps B sequences\n"
    "together, and with data parallelism (--strategy dp over D groups) each\n"
    "group steps its own. Sequence s (0 .. D*B-1) gets the random prompt of\n"
    "seed S + s (--prompt-ids: the same prompt for every sequence); rank 0\n"
    "prints 'generated[s]:' per sequence, and --dump-logits holds sequence\n"
    "0's rows, then sequence 1's, and so on.\n";

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

int32_t argmax(const float *row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

} // namespace

int main(int argc, char **argv) {
  std::string model, saveWeights, dumpLogits, promptIds;
  std::vector<std::string> weightArgs;
  long long randomSeed = -1, promptRandom = 0, maxNew = 16, seed = 1;
  long long rankArg = -1, deviceArg = -1;
  std::string store;
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
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--weights") {
      if (!value(v))
        return fail("--weights needs a path");
      weightArgs.push_back(v);
    } else if (a == "--random-weights") {
      if (!number(randomSeed) || randomSeed < 0)
        return fail("--random-weights needs a non-negative integer seed");
    } else if (a == "--save-weights") {
      if (!value(saveWeights))
        return fail("--save-weights needs a file");
    } else if (a == "--prompt-ids") {
      if (!value(promptIds))
        return fail("--prompt-ids needs a list like 1,2,3");
    } else if (a == "--prompt-random") {
      if (!number(promptRandom) || promptRandom < 1)
        return fail("--prompt-random needs a positive count");
    } else if (a == "--max-new-tokens") {
      if (!number(maxNew) || maxNew < 0)
        return fail("--max-new-tokens needs a non-negative count");
    } else if (a == "--seed") {
      if (!number(seed))
        return fail("--seed needs an integer");
    } else if (a == "--rank") {
      if (!number(rankArg) || rankArg < 0)
        return fail("--rank needs a non-negative integer");
    } else if (a == "--store") {
      if (!value(store))
        return fail("--store needs a file");
    } else if (a == "--device") {
      if (!number(deviceArg) || deviceArg < 0)
        return fail("--device needs a CUDA device ordinal");
    } else if (a == "--dump-logits") {
      if (!value(dumpLogits))
        return fail("--dump-logits needs a file");
    } else if (!a.empty() && a[0] == '-') {
      return fail("unknown option '" + a + "' (see --help)");
    } else if (model.empty()) {
      model = a;
    } else {
      return fail("more than one model given: '" + model + "' and '" + a + "'");
    }
  }
  if (model.empty())
    return fail("no model given (see --help)");
  if (weightArgs.empty() == (randomSeed < 0))
    return fail("give exactly one of --weights and --random-weights");
  if (promptIds.empty() == (promptRandom == 0))
    return fail("give exactly one of --prompt-ids and --prompt-random");

  StatusOr<ArtifactSpec> artifact = ArtifactReader::readFile(model);
  if (!artifact.isOk())
    return fail(artifact.status().message());
  auto spec = std::make_shared<const ArtifactSpec>(std::move(artifact.value()));
  const int64_t vocab = spec->model.vocabSize;

  const bool gpuModel = spec->target.kind == TargetKind::kSm90a;
  if (!gpuModel && (rankArg >= 0 || !store.empty() || deviceArg >= 0))
    return fail("--rank, --store and --device apply to GPU models; CPU ranks "
                "run under mpirun");
  if ((rankArg >= 0) != !store.empty())
    return fail("--rank and --store go together (see --help)");
  if (rankArg >= 0 && spec->target.numRanks == 1)
    return fail("--rank: the artifact is not partitioned (1 rank)");
  const int device = deviceArg >= 0 ? int(deviceArg)
                     : rankArg >= 0 ? int(rankArg)
                                    : 0;

  // Partitioned: one process per rank, through NCCL (GPU models) or MPI.
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<CudaDevice> commDevice; // NCCL's device, outlives comm
  if (gpuModel && spec->target.numRanks > 1) {
    if (rankArg < 0)
      return fail("the GPU artifact is partitioned over " +
                  std::to_string(spec->target.numRanks) +
                  " ranks: start one process per rank with --rank R --store "
                  "FILE (see --help)");
    if (rankArg >= spec->target.numRanks)
      return fail("--rank " + std::to_string(rankArg) + ": the artifact has " +
                  std::to_string(spec->target.numRanks) + " ranks");
    StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::open(device);
    if (!dev.isOk())
      return fail(dev.status().message());
    commDevice = std::move(dev.value());
    StatusOr<std::unique_ptr<NcclCommunicator>> nccl = NcclCommunicator::create(
        *commDevice, int(rankArg), spec->target.numRanks, store);
    if (!nccl.isOk())
      return fail("rank " + std::to_string(rankArg) + ": " +
                  nccl.status().message());
    comm = std::move(nccl.value());
  } else if (spec->target.numRanks > 1) {
#ifdef KIMI_RUN_HAVE_MPI
    StatusOr<std::unique_ptr<MpiCommunicator>> mpi = MpiCommunicator::create();
    if (!mpi.isOk())
      return fail(mpi.status().message());
    comm = std::move(mpi.value());
#else
    return fail("the artifact is partitioned over " +
                std::to_string(spec->target.numRanks) +
                " ranks, but this kimi-run was built without MPI");
#endif
  }
  const bool quiet = comm && comm->rank() != 0;
  // Data parallelism: this rank's group serves its own sequences.
  const int32_t groups = spec->target.dataParallel;
  const int32_t group =
      comm ? spec->target.dataParallelGroup(comm->rank()) : 0;
  if (quiet)
    saveWeights.clear(); // rank 0 writes them (and --dump-logits)

  // The prompt ids (--prompt-ids), shared by every sequence; random prompts
  // are drawn per sequence once the session's batch is known.
  std::vector<int32_t> promptList;
  if (!promptIds.empty()) {
    size_t at = 0;
    while (at <= promptIds.size()) {
      size_t comma = promptIds.find(',', at);
      std::string item = promptIds.substr(at, comma == std::string::npos
                                                  ? std::string::npos
                                                  : comma - at);
      long long id;
      if (!parseInt(item, id) || id < INT32_MIN || id > INT32_MAX)
        return fail("--prompt-ids: '" + item + "' is not a token id");
      promptList.push_back(static_cast<int32_t>(id));
      if (comma == std::string::npos)
        break;
      at = comma + 1;
    }
  }

  // The weights.
  std::vector<std::string> paths;
  std::string tempWeights;
  if (randomSeed >= 0) {
    std::string file = saveWeights;
    if (file.empty()) {
      char tmpl[] = "/tmp/kimi-run-weights-XXXXXX";
      int fd = mkstemp(tmpl);
      if (fd < 0)
        return fail(std::string("cannot create a temporary file: ") +
                    std::strerror(errno));
      close(fd);
      file = tempWeights = tmpl;
    }
    Status s = writeRandomWeights(*spec, static_cast<uint64_t>(randomSeed), file);
    if (!s.isOk())
      return fail(s.message());
    paths.push_back(file);
  } else {
    paths = weightArgs;
  }
  StatusOr<std::unique_ptr<WeightLoader>> loader = WeightLoader::open(paths);
  if (!tempWeights.empty())
    unlink(tempWeights.c_str()); // mapped: the data stays until unmapped
  if (!loader.isOk())
    return fail(loader.status().message());
  if (int64_t skipped = loader.value()->skippedTensors())
    std::fprintf(stderr,
                 "weights: skipping %lld vision tensors (vision_tower.*, "
                 "mm_projector.*): kimi runs the text model\n",
                 (long long)skipped);
  LoadProgressLine progressLine(*loader.value());
  loader.value()->setProgressCallback(
      [&](const WeightLoader::Progress &p) { progressLine(p); });
  StatusOr<std::shared_ptr<Executable>> exe =
      createExecutable(spec, *loader.value(), comm.get(), device);
  progressLine.finish();
  if (!exe.isOk())
    return fail(exe.status().message());
  StatusOr<std::unique_ptr<Session>> session = Session::create(exe.value());
  if (!session.isOk())
    return fail(session.status().message());
  Session &s = *session.value();

  // Sequences: this session steps B of them; with data parallelism rank r
  // serves sequences group * B .. group * B + B - 1 of the whole batch.
  const int64_t B = s.batch();
  const int64_t sequences = int64_t(groups) * B;
  std::vector<int32_t> tokens;
  for (int64_t b = 0; b < B; ++b) {
    if (!promptList.empty()) {
      tokens.insert(tokens.end(), promptList.begin(), promptList.end());
      continue;
    }
    std::mt19937_64 rng(static_cast<uint64_t>(seed + group * B + b));
    for (long long i = 0; i < promptRandom; ++i)
      tokens.push_back(static_cast<int32_t>(rng() % uint64_t(vocab)));
  }
  const int64_t promptLength = static_cast<int64_t>(tokens.size()) / B;

  std::FILE *dump = nullptr;
  if (!quiet && !dumpLogits.empty() &&
      !(dump = std::fopen(dumpLogits.c_str(), "wb")))
    return fail("cannot write '" + dumpLogits + "': " + std::strerror(errno));
  // Every sequence's logits rows (prompt rows, then one per new token),
  // written sequence by sequence at the end.
  const bool keepRows = !dumpLogits.empty();
  std::vector<std::vector<float>> rows(static_cast<size_t>(B));
  auto emit = [&](const LogitsView &l) {
    const int64_t per = l.rows / B;
    if (keepRows)
      for (int64_t b = 0; b < B; ++b)
        rows[b].insert(rows[b].end(), l.data + b * per * l.vocab,
                       l.data + (b + 1) * per * l.vocab);
  };

  if (quiet && !std::freopen("/dev/null", "w", stdout))
    return fail("cannot silence stdout of rank " + std::to_string(comm->rank()));
  std::printf("model: %s, %d layers (%s), vocab %lld, target %s\n",
              spec->model.modelType.c_str(), spec->model.numLayers,
              spec->model.layerKinds.c_str(), (long long)vocab,
              spec->target.name().c_str());
  if (comm)
    std::printf("ranks: %d (%s)\n", comm->size(), comm->backendName());
  std::printf("weights: %.1f MiB loaded in %.3f s\n",
              exe.value()->weightBytes() / 1048576.0,
              exe.value()->weightLoadSeconds());
  std::printf("prompt: %lld tokens", (long long)promptLength);
  if (sequences > 1)
    std::printf(" per sequence, %lld sequences", (long long)sequences);
  std::printf("\n");

  // Generation needs only each prompt's last logits row; --dump-logits all.
  StatusOr<LogitsView> logits =
      s.prefill(tokens, keepRows ? PrefillLogits::kAll : PrefillLogits::kLast);
  if (!logits.isOk())
    return fail(logits.status().message());
  emit(logits.value());
  // generated[b]: the greedy tokens of this rank's sequence b.
  std::vector<std::vector<int32_t>> generated(static_cast<size_t>(B));
  std::vector<int32_t> next(static_cast<size_t>(B));
  if (maxNew > 0) {
    const LogitsView &l = logits.value();
    const int64_t perSequence = l.rows / B; // promptLength, or 1
    for (int64_t b = 0; b < B; ++b)
      generated[b].push_back(
          argmax(l.data + ((b + 1) * perSequence - 1) * l.vocab, l.vocab));
  }
  while (static_cast<long long>(generated[0].size()) < maxNew) {
    for (int64_t b = 0; b < B; ++b)
      next[b] = generated[b].back();
    StatusOr<LogitsView> step = s.decode(next.data(), next.size());
    if (!step.isOk())
      return fail(step.status().message());
    emit(step.value());
    for (int64_t b = 0; b < B; ++b)
      generated[b].push_back(
          argmax(step.value().data + b * step.value().vocab, step.value().vocab));
  }

  // Every rank holds as many rows and tokens (same prompt length and steps);
  // with data parallelism rank 0 gathers them and keeps the first rank of
  // each group.
  std::vector<int32_t> myTokens;
  std::vector<float> myRows;
  for (int64_t b = 0; b < B; ++b) {
    myTokens.insert(myTokens.end(), generated[b].begin(), generated[b].end());
    myRows.insert(myRows.end(), rows[b].begin(), rows[b].end());
  }
  std::vector<int32_t> allTokens = myTokens;
  std::vector<float> allRows = myRows;
  int perGroup = 1;
  if (groups > 1) {
    const int n = comm->size();
    perGroup = n / groups;
    allTokens.resize(myTokens.size() * size_t(n));
    allRows.resize(myRows.size() * size_t(n));
    Status g = gatherAll(comm.get(), commDevice.get(), myTokens, allTokens);
    if (g.isOk() && keepRows)
      g = gatherAll(comm.get(), commDevice.get(), myRows, allRows);
    if (!g.isOk())
      return fail("gathering the data-parallel groups' results: " +
                  g.message());
  }
  const size_t tokensPer = generated[0].size(), rowsPer = rows[0].size();
  int64_t dumpedRows = 0;
  for (int64_t seq = 0; seq < sequences; ++seq) {
    // Sequence seq = group * B + b, held by the group's first rank.
    const size_t holder = size_t(seq / B) * size_t(perGroup), b = size_t(seq % B);
    const size_t at = holder * size_t(B) + b;
    if (dump)
      std::fwrite(allRows.data() + at * rowsPer, sizeof(float), rowsPer, dump);
    dumpedRows += static_cast<int64_t>(rowsPer) / vocab;
    if (sequences == 1)
      std::printf("generated:");
    else
      std::printf("generated[%lld]:", (long long)seq);
    for (size_t i = 0; i < tokensPer; ++i)
      std::printf(" %d", allTokens[at * tokensPer + i]);
    std::printf("\n");
  }
  if (dump)
    std::fclose(dump);
  const SessionCounters &c = s.counters();
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
  if (dump)
    std::printf("logits: %lld rows x %lld written to %s\n",
                (long long)dumpedRows, (long long)vocab, dumpLogits.c_str());
  // KIMI_GPU_PROFILE=1: the GPU model's per-kernel device times.
  if (std::string profile = exe.value()->profileReport(); !profile.empty())
    std::fprintf(stderr, "%s", profile.c_str());
  if (comm) {
    // The executable talks to the communicator until it is gone.
    session.value().reset();
    exe.value().reset();
    comm.reset();
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
