//===- reader.cpp - Opens and verifies a kimi artifact --------------------===//

#include "runtime/artifact/reader.h"
#include "runtime/artifact/artifact_generated.h"
#include "runtime/artifact/checksum.h"
#include "runtime/artifact/validate.h"
#include "runtime/support/file_io.h"
#include "runtime/support/text.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kimi::rt {
namespace fb = ::kimi::artifact::fb;

namespace {

constexpr size_t kPrefixBytes = sizeof(flatbuffers::uoffset_t);
// FlatBuffers' own limit is 2 GiB; stay below it.
constexpr uint64_t kMaxArtifactBytes = (uint64_t(1) << 31) - 1;

flatbuffers::Verifier::Options verifierOptions() {
  flatbuffers::Verifier::Options o;
  o.max_depth = 16;            // the schema nests 4 deep
  o.max_tables = 50u * 1000u * 1000u; // a K3 manifest has ~10^5 tables
  o.check_alignment = true;
  return o;
}

const flatbuffers::Table *asTable(const void *p) {
  return reinterpret_cast<const flatbuffers::Table *>(p);
}

template <typename T>
std::string firstBadElement(flatbuffers::Verifier &v,
                            const flatbuffers::Vector<flatbuffers::Offset<T>> *vec,
                            const char *what) {
  for (flatbuffers::uoffset_t i = 0; i < vec->size(); ++i)
    if (!v.VerifyTable(vec->Get(i)))
      return std::string(what) + " " + std::to_string(i);
  return "";
}

/// Runs the verification of Artifact::Verify piece by piece to name the first
/// part that fails. Only called once the whole-buffer verification failed.
std::string locateCorruption(const uint8_t *buf, size_t size) {
  // Over the whole buffer, size prefix included, like the verifier that
  // failed: alignment is checked relative to the verifier's start, and from
  // buf + 4 an 8-byte field 4 bytes off its alignment would pass.
  flatbuffers::Verifier v(buf, size, verifierOptions());
  if (!v.VerifyOffset(kPrefixBytes))
    return "root offset";
  const fb::Artifact *root = fb::GetArtifact(buf + kPrefixBytes);
  const flatbuffers::Table *t = asTable(root);
  if (!t->VerifyTableStart(v))
    return "root table";
  if (!t->VerifyField<uint32_t>(v, fb::Artifact::VT_FORMAT_VERSION, 4))
    return "format_version";
  if (!t->VerifyOffset(v, fb::Artifact::VT_MODEL) || !v.VerifyTable(root->model()))
    return "section 'model'";
  if (!t->VerifyOffset(v, fb::Artifact::VT_TARGET) ||
      !v.VerifyTable(root->target()))
    return "section 'target'";
  if (!t->VerifyOffset(v, fb::Artifact::VT_KERNELS) ||
      !v.VerifyVector(root->kernels()))
    return "section 'kernels'";
  if (root->kernels()) {
    std::string e = firstBadElement(v, root->kernels(), "kernel");
    if (!e.empty())
      return "section 'kernels', " + e;
  }
  if (!t->VerifyOffset(v, fb::Artifact::VT_ENTRIES) ||
      !v.VerifyVector(root->entries()))
    return "section 'entries'";
  if (root->entries()) {
    std::string e = firstBadElement(v, root->entries(), "entry");
    if (!e.empty())
      return "section 'entries', " + e;
  }
  if (!t->VerifyOffset(v, fb::Artifact::VT_WEIGHTS) ||
      !v.VerifyVector(root->weights()))
    return "section 'weights'";
  if (root->weights()) {
    std::string e = firstBadElement(v, root->weights(), "weight");
    if (!e.empty())
      return "section 'weights', " + e;
  }
  return "";
}

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

std::vector<int64_t> shapeOf(const flatbuffers::Vector<int64_t> *v) {
  // Copied as bytes: the verifier checks that a vector's 4-byte length is
  // aligned, not that its 8-byte elements are, so in a changed file they
  // may sit 4 bytes off (an element read was a misaligned load, found by
  // fuzz-artifact under UBSan). Little-endian, as the format.
  std::vector<int64_t> out(v ? v->size() : 0);
  if (!out.empty())
    std::memcpy(out.data(), v->Data(), out.size() * sizeof(int64_t));
  return out;
}

std::vector<TensorSpec>
specsOf(const flatbuffers::Vector<flatbuffers::Offset<fb::TensorSpec>> *v) {
  std::vector<TensorSpec> out;
  if (!v)
    return out;
  out.reserve(v->size());
  for (const fb::TensorSpec *s : *v)
    out.push_back({str(s->name()), static_cast<TensorRole>(s->role()),
                   static_cast<DType>(s->dtype()), shapeOf(s->shape())});
  return out;
}

/// Copies a verified buffer into the plain model. Absent required tables are
/// errors; absent vectors are empty (validateArtifact judges them).
StatusOr<ArtifactSpec> convert(const fb::Artifact *root) {
  ArtifactSpec a;
  a.formatVersion = root->format_version();
  if (a.formatVersion != kArtifactFormatVersion)
    return invalidArtifact("unsupported format_version " +
                           std::to_string(a.formatVersion) +
                           " (this runtime reads version " +
                           std::to_string(kArtifactFormatVersion) + ")");
  const fb::ModelInfo *m = root->model();
  if (!m)
    return invalidArtifact("section 'model' is missing");
  a.model.modelType = str(m->model_type());
  a.model.vocabSize = m->vocab_size();
  a.model.hiddenSize = m->hidden_size();
  a.model.numLayers = m->num_layers();
  a.model.layerKinds = str(m->layer_kinds());
  a.model.maxPositions = m->max_position_embeddings();
  a.model.configJson = str(m->config_json());
  a.model.configDigest = m->config_digest();
  a.compiler = str(root->compiler());

  const fb::Target *t = root->target();
  if (!t)
    return invalidArtifact("section 'target' is missing");
  a.target.kind = static_cast<TargetKind>(t->kind());
  a.target.numRanks = t->num_ranks();
  if (const auto *grid = t->grid_shape())
    a.target.gridShape.assign(grid->begin(), grid->end());
  a.target.dataParallel = t->data_parallel();

  if (const auto *kernels = root->kernels()) {
    for (const fb::Kernel *k : *kernels) {
      KernelImage img;
      img.name = str(k->name());
      img.kind = static_cast<KernelKind>(k->kind());
      if (const auto *bytes = k->image())
        img.image.assign(bytes->begin(), bytes->end());
      img.waitsGridDependencies = k->waits_grid_dependencies();
      img.checksum = k->checksum();
      a.kernels.push_back(std::move(img));
    }
  }
  if (const auto *entries = root->entries()) {
    for (const fb::Entry *e : *entries) {
      EntrySpec es{str(e->name()), str(e->symbol()), e->kernel(),
                   specsOf(e->inputs()), specsOf(e->outputs()), {}, {}};
      if (const auto *buffers = e->buffers())
        for (const fb::Buffer *fbb : *buffers) {
          BufferSpec bs;
          bs.name = str(fbb->name());
          bs.kind = static_cast<BufferKind>(fbb->kind());
          bs.dtype = static_cast<DType>(fbb->dtype());
          bs.shape = shapeOf(fbb->shape());
          if (const auto *data = fbb->data())
            bs.data.assign(data->begin(), data->end());
          es.buffers.push_back(std::move(bs));
        }
      if (const auto *launches = e->launches())
        for (const fb::Launch *l : *launches) {
          LaunchSpec ls;
          ls.kernel = l->kernel();
          ls.function = str(l->function());
          // Absent or short dimension vectors become 0s: the validator
          // names them.
          for (int d = 0; d < 3; ++d) {
            ls.grid[d] = l->grid() && l->grid()->size() == 3 ? l->grid()->Get(d) : 0;
            ls.block[d] = l->block() && l->block()->size() == 3 ? l->block()->Get(d) : 0;
          }
          ls.sharedBytes = l->shared_bytes();
          if (const auto *args = l->args())
            ls.args.assign(args->begin(), args->end());
          es.launches.push_back(std::move(ls));
        }
      a.entries.push_back(std::move(es));
    }
  }
  if (const auto *weights = root->weights()) {
    a.weights.reserve(weights->size());
    for (const fb::Weight *w : *weights) {
      WeightSpec ws;
      ws.name = str(w->name());
      if (const auto *aliases = w->aliases())
        for (const flatbuffers::String *s : *aliases)
          ws.aliases.push_back(str(s));
      ws.shape = shapeOf(w->shape());
      ws.dtype = static_cast<DType>(w->dtype());
      ws.symbol = str(w->symbol());
      ws.shardDim = w->shard_dim();
      ws.shardParts = w->shard_parts();
      ws.paddedForms = w->padded_forms();
      a.weights.push_back(std::move(ws));
    }
  }
  return a;
}

} // namespace

StatusOr<ArtifactSpec> ArtifactReader::readBytes(const void *data, size_t size) {
  if (!data && size)
    return invalidArgument("artifact bytes: null pointer");
  if (size < kPrefixBytes)
    return invalidArtifact("artifact truncated: " + std::to_string(size) +
                           " bytes, shorter than the 12-byte header");
  if (size < 2 * kPrefixBytes + 4)
    return invalidArtifact(
        "artifact truncated: " + std::to_string(size) + " of " +
        std::to_string(uint64_t(flatbuffers::ReadScalar<uint32_t>(data)) +
                       kPrefixBytes + kArtifactTrailerBytes) +
        " bytes");
  if (size > kMaxArtifactBytes)
    return invalidArtifact("artifact of " + std::to_string(size) +
                           " bytes exceeds the 2 GiB limit");
  const uint8_t *bytes = static_cast<const uint8_t *>(data);
  const char *ident = reinterpret_cast<const char *>(bytes) + 2 * kPrefixBytes;
  if (std::memcmp(ident, fb::ArtifactIdentifier(), 4) != 0)
    return invalidArtifact("not a kimi artifact: file identifier is " +
                           quoted(std::string(ident, 4)) + ", expected 'KIMI'");
  uint32_t prefix = flatbuffers::ReadScalar<uint32_t>(bytes);
  const uint64_t body = uint64_t(prefix) + kPrefixBytes;
  const uint64_t expected = body + kArtifactTrailerBytes;
  if (size == body)
    return invalidArtifact(
        "artifact truncated: " + std::to_string(size) + " of " +
        std::to_string(expected) +
        " bytes, its checksum trailer missing (cut there, or written before "
        "format 3: this runtime reads format " +
        std::to_string(kArtifactFormatVersion) + ", compile it again)");
  if (size < expected)
    return invalidArtifact("artifact truncated: " + std::to_string(size) +
                           " of " + std::to_string(expected) + " bytes");
  if (size > expected)
    return invalidArtifact("artifact has " + std::to_string(size - expected) +
                           " unexpected bytes after its " +
                           std::to_string(expected) + " bytes");
  const uint8_t *trailer = bytes + body;
  if (std::memcmp(trailer, kArtifactTrailerMagic, 8) != 0)
    return invalidArtifact("artifact is corrupt: its checksum trailer does "
                           "not begin with 'KIMIXXH3'");
  uint64_t recorded = 0;
  for (int i = 0; i < 8; ++i)
    recorded |= uint64_t(trailer[8 + i]) << (8 * i);
  const uint64_t digest = contentDigest(bytes, body);

  // Copy into 8-byte aligned storage: the verifier checks alignment.
  std::vector<uint64_t> storage((body + 7) / 8);
  std::memcpy(storage.data(), data, body);
  const uint8_t *buf = reinterpret_cast<const uint8_t *>(storage.data());

  flatbuffers::Verifier verifier(buf, body, verifierOptions());
  if (!fb::VerifySizePrefixedArtifactBuffer(verifier)) {
    std::string where = locateCorruption(buf, body);
    return invalidArtifact(
        "artifact is corrupt: FlatBuffers verification failed" +
        (where.empty() ? std::string(" (too deep or too many tables)")
                       : " in " + where));
  }
  const fb::Artifact *root = fb::GetSizePrefixedArtifact(buf);
  // The file's digest covers every byte; only when it differs are the
  // kernel images hashed again, each against its own checksum, to name the
  // section at fault (an image, else the tables).
  if (digest != recorded) {
    if (const auto *kernels = root->kernels())
      for (flatbuffers::uoffset_t i = 0; i < kernels->size(); ++i) {
        const fb::Kernel *k = kernels->Get(i);
        const auto *image = k->image();
        uint64_t d = image ? contentDigest(image->data(), image->size())
                           : contentDigest(nullptr, 0);
        if (d != k->checksum())
          return invalidArtifact("artifact is corrupt: kernel " +
                                 std::to_string(i) + " (" +
                                 quoted(str(k->name())) +
                                 ") does not match its checksum (" +
                                 digestText(d) + ", recorded " +
                                 digestText(k->checksum()) + ")");
      }
    return invalidArtifact("artifact is corrupt: its tables (or its trailer) "
                           "do not match the file's checksum (" +
                           digestText(digest) + ", recorded " +
                           digestText(recorded) + ")");
  }
  KIMI_ASSIGN_OR_RETURN(ArtifactSpec spec, convert(root));
  spec.fileDigest = digest;
  KIMI_RETURN_IF_ERROR(validateArtifact(spec));
  return spec;
}

StatusOr<ArtifactSpec> ArtifactReader::readFile(const std::string &path) {
  const std::string label = "artifact '" + path + "'";
  KIMI_ASSIGN_OR_RETURN(RegularFile file, RegularFile::open(path, label));
  if (file.size() > kMaxArtifactBytes)
    return invalidArtifact(label + ": " + std::to_string(file.size()) +
                           " bytes exceed the 2 GiB limit");
  std::vector<uint8_t> bytes;
  KIMI_RETURN_IF_ERROR(file.readAll(bytes, label));
  StatusOr<ArtifactSpec> spec = readBytes(bytes.data(), bytes.size());
  if (!spec.isOk()) {
    Status s = spec.takeStatus();
    return s.addContext("artifact '" + path + "'");
  }
  return spec;
}

} // namespace kimi::rt
