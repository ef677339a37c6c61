//===- status.h - Status and StatusOr for the runtime -----------*- C++ -*-===//
//
// The runtime reports every failure as a value: a `Status` holds a code and a
// message that says what is wrong and where. No exceptions are used (the
// runtime builds with -fno-exceptions). Header only, no dependencies.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SUPPORT_STATUS_H
#define KIMI_RUNTIME_SUPPORT_STATUS_H

#include <cassert>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace kimi::rt {

/// Error classes; the C API maps them 1:1 onto `kimi_status`.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument = 1, // caller passed something wrong (token id, null, ...)
  kIo = 2,              // file could not be opened, read or mapped
  kInvalidArtifact = 3, // artifact fails verification or semantic checks
  kInvalidWeights = 4,  // safetensors file malformed, tensor missing/mismatched
  kModule = 5,          // shared object could not be loaded, symbol missing
  kExecution = 6,       // compiled code returned something inconsistent
  kFailedPrecondition = 7, // call out of order (decode before prefill, ...)
};

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }

  /// Prefixes the message with `context: ` (no-op on success).
  Status &addContext(const std::string &context) {
    if (!isOk())
      message_ = context + ": " + message_;
    return *this;
  }

private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status ioError(std::string m) {
  return Status(StatusCode::kIo, std::move(m));
}
inline Status invalidArtifact(std::string m) {
  return Status(StatusCode::kInvalidArtifact, std::move(m));
}
inline Status invalidWeights(std::string m) {
  return Status(StatusCode::kInvalidWeights, std::move(m));
}
inline Status moduleError(std::string m) {
  return Status(StatusCode::kModule, std::move(m));
}
inline Status executionError(std::string m) {
  return Status(StatusCode::kExecution, std::move(m));
}
inline Status failedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}

/// A value or the error that prevented it.
template <typename T> class [[nodiscard]] StatusOr {
public:
  StatusOr(Status status) : status_(std::move(status)) {
    assert(!status_.isOk() && "StatusOr built from an OK status without value");
    if (status_.isOk())
      status_ = Status(StatusCode::kExecution, "internal: OK status without value");
  }
  StatusOr(T value) : hasValue_(true) { new (&storage_) T(std::move(value)); }
  template <typename U,
            typename = std::enable_if_t<std::is_constructible_v<T, U &&> &&
                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                        !std::is_same_v<std::decay_t<U>, T>>>
  StatusOr(U &&value) : hasValue_(true) {
    new (&storage_) T(std::forward<U>(value));
  }
  StatusOr(StatusOr &&other) : status_(std::move(other.status_)) {
    if (other.hasValue_) {
      new (&storage_) T(std::move(*other.ptr()));
      hasValue_ = true;
    }
  }
  StatusOr(const StatusOr &) = delete;
  StatusOr &operator=(const StatusOr &) = delete;
  StatusOr &operator=(StatusOr &&other) {
    if (this != &other) {
      reset();
      status_ = std::move(other.status_);
      if (other.hasValue_) {
        new (&storage_) T(std::move(*other.ptr()));
        hasValue_ = true;
      }
    }
    return *this;
  }
  ~StatusOr() { reset(); }

  bool isOk() const { return hasValue_; }
  explicit operator bool() const { return hasValue_; }
  const Status &status() const { return status_; }
  Status takeStatus() { return std::move(status_); }

  T &value() {
    assert(hasValue_);
    return *ptr();
  }
  const T &value() const {
    assert(hasValue_);
    return *ptr();
  }
  T &operator*() { return value(); }
  const T &operator*() const { return value(); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }

private:
  T *ptr() { return std::launder(reinterpret_cast<T *>(&storage_)); }
  const T *ptr() const {
    return std::launder(reinterpret_cast<const T *>(&storage_));
  }
  void reset() {
    if (hasValue_) {
      ptr()->~T();
      hasValue_ = false;
    }
  }

  Status status_;
  bool hasValue_ = false;
  alignas(T) unsigned char storage_[sizeof(T)];
};

} // namespace kimi::rt

#define KIMI_STATUS_CONCAT_INNER(a, b) a##b
#define KIMI_STATUS_CONCAT(a, b) KIMI_STATUS_CONCAT_INNER(a, b)

/// Returns the status from the enclosing function when it is an error.
#define KIMI_RETURN_IF_ERROR(expr)                                             \
  do {                                                                         \
    ::kimi::rt::Status kimi_status_tmp_ = (expr);                              \
    if (!kimi_status_tmp_.isOk())                                              \
      return kimi_status_tmp_;                                                 \
  } while (0)

/// `KIMI_ASSIGN_OR_RETURN(auto x, makeX());`
#define KIMI_ASSIGN_OR_RETURN(lhs, expr)                                       \
  KIMI_ASSIGN_OR_RETURN_IMPL(KIMI_STATUS_CONCAT(kimi_statusor_, __LINE__), lhs, \
                             expr)
#define KIMI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                             \
  auto tmp = (expr);                                                           \
  if (!tmp.isOk())                                                             \
    return tmp.takeStatus();                                                   \
  lhs = std::move(tmp.value())

#endif // KIMI_RUNTIME_SUPPORT_STATUS_H
