//===- mapped_read.h - Reads of file mappings that survive truncation -*- C++ -*-===//
//
// A file mapped with mmap and then truncated by another process turns every
// read of the lost pages into SIGBUS, which kills the process with no word.
// Copies out of a mapping go through copyFromMapping: a SIGBUS raised by
// reading its source range ends the copy, which reports failure, and the
// caller returns an error naming the file. A SIGBUS anywhere else keeps the
// disposition it had (the handler passes it on).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SUPPORT_MAPPED_READ_H
#define KIMI_RUNTIME_SUPPORT_MAPPED_READ_H

#include <cstddef>

namespace kimi::rt {

/// Copies `bytes` bytes from `src` (inside a file mapping) to `dst`; false
/// when the source could not be read (its file shrank below it).
bool copyFromMapping(void *dst, const void *src, size_t bytes);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SUPPORT_MAPPED_READ_H
