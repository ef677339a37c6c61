//===- checksum.cpp - Content digests of an artifact's sections -----------===//

#include "runtime/artifact/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

namespace kimi::rt {

uint64_t contentDigest(const void *data, size_t size) {
  return XXH3_64bits(data, size);
}

std::string digestText(uint64_t digest) {
  char text[24];
  std::snprintf(text, sizeof(text), "xxh3:%016llx",
                static_cast<unsigned long long>(digest));
  return text;
}

} // namespace kimi::rt
