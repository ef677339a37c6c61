//===- mapped_read.cpp - Reads of file mappings that survive truncation ---===//

#include "runtime/support/mapped_read.h"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

namespace kimi::rt {

namespace {

// The copy in progress on this thread: where to jump and the range whose
// faults are its own. Set before the copy touches the source, so the
// handler reads thread-local storage that already exists. Volatile, with
// signal fences around the copy: the compiler knows memcpy does not read
// them and would otherwise drop the stores before it.
thread_local sigjmp_buf *volatile tJump = nullptr;
thread_local const char *volatile tBegin = nullptr;
thread_local const char *volatile tEnd = nullptr;

struct sigaction gPrevious;
std::once_flag gInstalled;

void onSigbus(int sig, siginfo_t *info, void *context) {
  const char *at = static_cast<const char *>(info->si_addr);
  if (tJump && at >= tBegin && at < tEnd) {
    sigjmp_buf *jump = tJump;
    tJump = nullptr;
    siglongjmp(*jump, 1);
  }
  // Not a copy's fault: what the process had before.
  if (gPrevious.sa_flags & SA_SIGINFO) {
    gPrevious.sa_sigaction(sig, info, context);
    return;
  }
  if (gPrevious.sa_handler != SIG_DFL && gPrevious.sa_handler != SIG_IGN) {
    gPrevious.sa_handler(sig);
    return;
  }
  // Default: the faulting instruction runs again and the signal ends the
  // process as it would have.
  ::signal(SIGBUS, SIG_DFL);
}

void install() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = onSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &gPrevious);
}

} // namespace

bool copyFromMapping(void *dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return true;
  std::call_once(gInstalled, install);
  sigjmp_buf jump;
  // The signal mask is saved: the jump leaves the handler, where SIGBUS is
  // blocked.
  if (sigsetjmp(jump, 1) != 0)
    return false;
  tBegin = static_cast<const char *>(src);
  tEnd = tBegin + bytes;
  tJump = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tJump = nullptr;
  return true;
}

} // namespace kimi::rt
