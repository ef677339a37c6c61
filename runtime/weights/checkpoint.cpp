//===- checkpoint.cpp - Opens a checkpoint: files, directories, indexes ---===//

#include "runtime/weights/checkpoint.h"
#include "runtime/support/text.h"
#include "runtime/weights/json.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <map>
#include <set>
#include <sys/stat.h>

namespace kimi::rt {

namespace {

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Status listSafetensors(const std::string &dir, std::vector<std::string> &out) {
  DIR *d = opendir(dir.c_str());
  if (!d)
    return ioError("weights directory " + quoted(dir) + ": " +
                   std::strerror(errno));
  while (dirent *e = readdir(d)) {
    std::string name = e->d_name;
    if (endsWith(name, ".safetensors"))
      out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return Status::ok();
}

Status readSmallFile(const std::string &path, std::string &out) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return ioError(quoted(path) + ": " + std::strerror(errno));
  char buf[1 << 16];
  size_t n;
  // An index of K3's ~200K tensors is about 20 MB; refuse far larger.
  constexpr size_t kMaxIndexBytes = size_t(1) << 30;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.append(buf, n);
    if (out.size() > kMaxIndexBytes) {
      std::fclose(f);
      return invalidWeights(quoted(path) + " is over 1 GiB: not an index");
    }
  }
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed)
    return ioError(quoted(path) + ": read error");
  return Status::ok();
}

/// Opens the shards of the index at `indexPath` and checks the index
/// against them and against the directory.
Status openIndexed(const std::string &indexPath,
                   std::vector<std::unique_ptr<SafetensorsFile>> &out) {
  const std::string where = "checkpoint index " + quoted(indexPath);
  std::string text;
  KIMI_RETURN_IF_ERROR(readSmallFile(indexPath, text));
  StatusOr<JsonValue> parsed = parseJson(text.data(), text.size());
  if (!parsed.isOk())
    return invalidWeights(where + ": " + parsed.status().message());
  const JsonValue &root = parsed.value();
  const JsonValue *map = root.isObject() ? root.find("weight_map") : nullptr;
  if (!map || !map->isObject())
    return invalidWeights(where + ": no \"weight_map\" object");

  // tensor -> shard, and shard -> its tensors, from the index.
  std::map<std::string, std::set<std::string>> byShard;
  std::map<std::string, std::string> shardOf;
  for (const auto &[tensor, file] : map->object) {
    if (!file.isString())
      return invalidWeights(where + ": tensor " + quoted(tensor) +
                            " maps to a " + jsonKindName(file.kind) +
                            ", not a file name");
    const std::string &shard = file.string;
    if (shard.empty() || shard.find('/') != std::string::npos ||
        shard == "." || shard == "..")
      return invalidWeights(where + ": tensor " + quoted(tensor) +
                            " names shard " + quoted(shard) +
                            ", which is not a file name in the index's "
                            "directory");
    shardOf[tensor] = shard;
    byShard[shard].insert(tensor);
  }
  if (byShard.empty())
    return invalidWeights(where + ": the weight_map is empty");

  const std::string dir = directoryOf(indexPath);
  std::vector<std::string> onDisk;
  KIMI_RETURN_IF_ERROR(listSafetensors(dir, onDisk));
  for (const std::string &file : onDisk)
    if (!byShard.count(file))
      return invalidWeights(where + ": shard " + quoted(dir + "/" + file) +
                            " is in the checkpoint's directory but the index "
                            "does not list it");

  for (const auto &[shard, tensors] : byShard) {
    const std::string path = dir + "/" + shard;
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      return invalidWeights(where + ": shard " + quoted(path) +
                            " (holding " + quoted(*tensors.begin()) +
                            (tensors.size() > 1
                                 ? " and " + std::to_string(tensors.size() - 1) +
                                       " more"
                                 : std::string()) +
                            ") is missing: " + std::strerror(errno));
    KIMI_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::open(path));
    for (const std::string &tensor : tensors)
      if (!file->find(tensor))
        return invalidWeights(where + " names tensor " + quoted(tensor) +
                              " in shard " + quoted(path) +
                              ", which does not hold it");
    for (const TensorView &t : file->tensors()) {
      auto it = shardOf.find(t.name);
      if (it == shardOf.end())
        return invalidWeights("shard " + quoted(path) + " holds tensor " +
                              quoted(t.name) + ", which " + where +
                              " does not list");
      if (it->second != shard)
        return invalidWeights("shard " + quoted(path) + " holds tensor " +
                              quoted(t.name) + ", which " + where +
                              " puts in shard " + quoted(it->second) +
                              " (a duplicate)");
    }
    out.push_back(std::move(file));
  }
  return Status::ok();
}

} // namespace

StatusOr<std::vector<std::unique_ptr<SafetensorsFile>>>
openCheckpoint(const std::vector<std::string> &paths) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const std::string &path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      return ioError("weights " + quoted(path) + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      const std::string index = path + "/" + kSafetensorsIndexName;
      if (stat(index.c_str(), &st) == 0) {
        KIMI_RETURN_IF_ERROR(openIndexed(index, files));
        continue;
      }
      std::vector<std::string> names;
      KIMI_RETURN_IF_ERROR(listSafetensors(path, names));
      if (names.empty())
        return invalidWeights("weights directory " + quoted(path) +
                              " holds no .safetensors file and no " +
                              kSafetensorsIndexName);
      for (const std::string &name : names) {
        KIMI_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                              SafetensorsFile::open(path + "/" + name));
        files.push_back(std::move(file));
      }
      continue;
    }
    if (endsWith(path, ".json")) {
      KIMI_RETURN_IF_ERROR(openIndexed(path, files));
      continue;
    }
    KIMI_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::open(path));
    files.push_back(std::move(file));
  }
  return files;
}

} // namespace kimi::rt
