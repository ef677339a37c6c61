//===- FileIoTest.cpp - input files checked, output files whole -----------===//

#include "runtime/support/file_io.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace kimi::rt;

namespace {

std::string scratchDir() {
  char tmpl[] = "/tmp/kimi-file-io-XXXXXX";
  const char *dir = ::mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  return dir ? dir : "/tmp";
}

TEST(FileIo, OutputsGetTheModeTheUmaskAllows) {
  const std::string dir = scratchDir();
  for (mode_t mask : {mode_t(022), mode_t(077), mode_t(002)}) {
    mode_t old = ::umask(mask);
    const std::string path = dir + "/out-" + std::to_string(mask);
    Status s = writeBytesToFile(path, {1, 2, 3});
    ::umask(old);
    ASSERT_TRUE(s.isOk()) << s.message();
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask) << "umask " << mask;
    ::unlink(path.c_str());
  }
  ::rmdir(dir.c_str());
}

TEST(FileIo, OnlyRegularFilesAreRead) {
  const std::string dir = scratchDir();
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  StatusOr<std::string> r = readRegularFile(fifo, "input 'fifo'", 100);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().message(), "input 'fifo' is not a regular file");
  r = readRegularFile(dir, "input 'dir'", 100);
  ASSERT_FALSE(r.isOk());
  const std::string file = dir + "/f";
  ASSERT_TRUE(writeBytesToFile(file, std::vector<uint8_t>(50, 7)).isOk());
  r = readRegularFile(file, "input 'f'", 49);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("50 bytes exceed the limit of 49"), std::string::npos);
  r = readRegularFile(file, "input 'f'", 50);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*r, std::string(50, '\x07'));
  ::unlink(file.c_str());
  ::unlink(fifo.c_str());
  ::rmdir(dir.c_str());
}

} // namespace
