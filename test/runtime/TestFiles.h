//===- TestFiles.h - special files for the runtime's tests ------*- C++ -*-===//

#ifndef KIMI_TEST_RUNTIME_TESTFILES_H
#define KIMI_TEST_RUNTIME_TESTFILES_H

#include <gtest/gtest.h>

#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace kimi::test {

/// A FIFO with no writer at TempDir()/name, removed when this goes out of
/// scope: opening it for reading blocks unless the opener asks not to.
class ScopedFifo {
public:
  explicit ScopedFifo(const std::string &name)
      : path_(::testing::TempDir() + "/" + name) {
    ::unlink(path_.c_str());
    made_ = ::mkfifo(path_.c_str(), 0600) == 0;
  }
  ~ScopedFifo() { ::unlink(path_.c_str()); }
  bool made() const { return made_; }
  const std::string &path() const { return path_; }

private:
  std::string path_;
  bool made_ = false;
};

} // namespace kimi::test

#endif
