//===- kda_bench.cpp - time generated KDA kernels on a GPU -----------------===//
//
//   kimi-bench-kda prefill_8192x96.kimi [more.kimi ...] [--repeats 100]
//
// For each artifact (a kernel library from kimi-compile --target sm_90a) and
// each of its entries: random valid inputs (bench/kda/KdaInputs), one
// warm-up run, then `repeats` runs each timed with CUDA events; prints one
// JSON object per entry with the median and minimum time, the bytes the
// entry must move (each caller buffer read or written once, an in-place
// state twice), the achieved GB/s, the memory floor at the device-to-device
// copy rate measured in the same process, the percentage of that floor, the
// time of each launch alone and of the entry replayed as one CUDA graph.
//
//===----------------------------------------------------------------------===//

#include "bench/kda/KdaInputs.h"
#include "runtime/artifact/reader.h"
#include "runtime/cuda/gpu_entry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace kimi;
using namespace kimi::rt;

namespace {

int die(const std::string &m) {
  std::fprintf(stderr, "kimi-bench-kda: error: %s\n", m.c_str());
  return 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Device-to-device copy rate in GB/s (bytes read + written), median of 20
/// copies of 2 GiB.
StatusOr<double> copyRate(const CudaDevice &dev) {
  const size_t bytes = size_t(2) << 30;
  auto a = DeviceBuffer::allocate(dev, bytes);
  auto b = DeviceBuffer::allocate(dev, bytes);
  if (!a.isOk())
    return a.status();
  if (!b.isOk())
    return b.status();
  auto e0 = CudaEvent::create(dev), e1 = CudaEvent::create(dev);
  if (!e0.isOk() || !e1.isOk())
    return Status(StatusCode::kExecution, "events");
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    KIMI_RETURN_IF_ERROR((*e0)->record());
    KIMI_RETURN_IF_ERROR(b->copyFrom(*a, bytes));
    KIMI_RETURN_IF_ERROR((*e1)->record());
    auto t = CudaEvent::elapsedMs(**e0, **e1);
    if (!t.isOk())
      return t.status();
    if (i > 0)
      ms.push_back(*t);
  }
  return 2.0 * double(bytes) / (median(ms) * 1e-3) / 1e9;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> files;
  int repeats = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--help" || a == "-h") {
      std::printf("usage: kimi-bench-kda <kernels.kimi>... [--repeats N]\n"
                  "Times every entry of GPU kernel-library artifacts "
                  "(kimi-compile --target sm_90a) and prints JSON lines.\n");
      return 0;
    } else
      files.push_back(a);
  }
  if (files.empty())
    return die("no artifact given (see --help)");
  auto device = CudaDevice::open(0);
  if (!device.isOk())
    return die(device.status().message());
  CudaDevice &dev = **device;
  auto rate = copyRate(dev);
  if (!rate.isOk())
    return die("copy rate: " + rate.status().message());
  std::printf("{\"device\": \"%s\", \"copy_gbps\": %.1f}\n", dev.describe().c_str(), *rate);

  for (const std::string &file : files) {
    auto spec = ArtifactReader::readFile(file);
    if (!spec.isOk())
      return die(file + ": " + spec.status().message());
    for (const EntrySpec &es : spec->entries) {
      auto entry = GpuEntry::load(dev, *spec, es.name);
      if (!entry.isOk())
        return die(es.name + ": " + entry.status().message());
      bench::KdaInputOptions opts;
      opts.seed = 12345;
      opts.exactLimit = 1 << 20;
      auto inputs = bench::makeKdaInputs(es, opts);
      std::map<std::string, DeviceBuffer> mem;
      double bytes = 0;
      for (const BufferSpec &b : es.buffers) {
        if (b.kind == BufferKind::kTemporary || b.kind == BufferKind::kConstant)
          continue;
        auto buf = DeviceBuffer::allocate(dev, b.bytes());
        if (!buf.isOk())
          return die(b.name + ": " + buf.status().message());
        if (inputs.count(b.name)) {
          Status s = buf->upload(inputs[b.name].bytes.data(), b.bytes());
          if (!s.isOk())
            return die(s.message());
        }
        Status s = (*entry)->bind(b.name, *buf);
        if (!s.isOk())
          return die(s.message());
        bytes += double(b.bytes()) * (b.kind == BufferKind::kInOut ? 2 : 1);
        mem.emplace(b.name, std::move(*buf));
      }
      auto e0 = CudaEvent::create(dev), e1 = CudaEvent::create(dev);
      if (!e0.isOk() || !e1.isOk())
        return die("events");
      Status s = (*entry)->run();
      if (!s.isOk() || !(s = dev.synchronize()).isOk())
        return die(es.name + ": " + s.message());
      std::vector<double> ms;
      for (int r = 0; r < repeats; ++r) {
        (void)(*e0)->record();
        s = (*entry)->run();
        (void)(*e1)->record();
        auto t = CudaEvent::elapsedMs(**e0, **e1);
        if (!s.isOk() || !t.isOk())
          return die(es.name + ": " + (s.isOk() ? t.status().message() : s.message()));
        ms.push_back(*t);
      }
      // Each launch alone (it reads what the previous launches left).
      std::string perLaunch;
      for (size_t li = 0; li < es.launches.size(); ++li) {
        std::vector<double> lms;
        for (int r = 0; r < std::max(5, repeats / 5); ++r) {
          (void)(*e0)->record();
          s = (*entry)->runLaunches(li, 1);
          (void)(*e1)->record();
          auto t = CudaEvent::elapsedMs(**e0, **e1);
          if (!s.isOk() || !t.isOk())
            return die(es.name + ": launch timing failed");
          lms.push_back(*t);
        }
        char buf[128];
        std::snprintf(buf, sizeof buf, "%s\"%s\": %.4f", perLaunch.empty() ? "" : ", ",
                      es.launches[li].function.c_str(), median(lms));
        perLaunch += buf;
      }
      // The whole entry as one CUDA graph replay (no launch gaps).
      auto stream = CudaStream::create(dev);
      if (!stream.isOk())
        return die(stream.status().message());
      auto graph = CudaGraph::capture(dev, **stream, [&] { return (*entry)->run(stream->get()); });
      if (!graph.isOk())
        return die(es.name + ": graph capture: " + graph.status().message());
      std::vector<double> gms;
      for (int r = 0; r < repeats; ++r) {
        (void)(*e0)->record(stream->get());
        s = (*graph)->launch(**stream);
        (void)(*e1)->record(stream->get());
        auto t = CudaEvent::elapsedMs(**e0, **e1);
        if (!s.isOk() || !t.isOk())
          return die(es.name + ": graph replay failed");
        gms.push_back(*t);
      }
      double med = median(ms), mn = *std::min_element(ms.begin(), ms.end());
      double floorMs = bytes / (*rate * 1e9) * 1e3;
      std::string sources;
      for (const std::string &m : (*entry)->moduleSources())
        sources += (sources.empty() ? "" : ", ") + m;
      std::printf("{\"entry\": \"%s\", \"launches\": %zu, \"repeats\": %d, "
                  "\"ms_median\": %.4f, \"ms_min\": %.4f, \"ms_graph\": %.4f, "
                  "\"bytes\": %.0f, "
                  "\"gbps\": %.1f, \"floor_ms\": %.4f, \"pct_of_floor\": %.1f, "
                  "\"module\": \"%s\", \"launch_ms\": {%s}}\n",
                  es.name.c_str(), es.launches.size(), repeats, med, mn, median(gms), bytes,
                  bytes / (med * 1e-3) / 1e9, floorMs, 100.0 * floorMs / med,
                  sources.c_str(), perLaunch.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
