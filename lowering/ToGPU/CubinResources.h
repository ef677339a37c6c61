//===- CubinResources.h - per-kernel registers and shared memory -*- C++ -*-===//
//
// What ptxas gave each kernel of a cubin, read from the ELF it wrote: the
// registers a thread (the `.nv.info` section's EIATTR_REGCOUNT record of the
// kernel's symbol), its stack frame in local memory (EIATTR_FRAME_SIZE:
// register spills and local arrays; nonzero is worth a look) and the static
// shared memory a block (the size of the kernel's `.nv.shared.<name>`
// section). With the block size, registers and shared memory bound how many
// blocks an SM holds, the first thing to check when a kernel hides too
// little memory latency. `kimi-compile --emit=kernels` prints them.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_CUBINRESOURCES_H
#define KIMI_LOWERING_TOGPU_CUBINRESOURCES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kimi::gpu {

struct KernelResources {
  std::string name;
  int64_t registers = -1; // -1: the cubin records none
  int64_t frameBytes = 0;  // local memory a thread
  int64_t sharedBytes = 0;
};

/// The kernels of `cubin` (an NVIDIA ELF: 64-bit, little-endian, machine
/// EM_CUDA) in section order. Errors say what is malformed; every offset is
/// checked against the image, so no input reads out of bounds.
llvm::Expected<std::vector<KernelResources>> readCubinResources(llvm::StringRef cubin);

/// The kernels of every cubin in `cubins`, sorted by name (two builds'
/// reports diff line by line), as `{"kernels": [{"name", "registers",
/// "frame_bytes", "shared_bytes"}, ...]}` on `os`. With `modules` (one per
/// cubin), names are `module::kernel`: a kernel library's entries each have
/// their own module of like-named kernels. Errors name what is malformed;
/// nothing is written then.
llvm::Error writeKernelReport(llvm::ArrayRef<std::string> cubins,
                              llvm::raw_ostream &os,
                              llvm::ArrayRef<std::string> modules = {});

} // namespace kimi::gpu

#endif
