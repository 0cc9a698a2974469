#include "hub/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace splash::hub {

namespace {

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability only; the rename itself already happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path dest) : dest_(std::move(dest)) {
  partial_path_ = dest_;
  partial_path_ += ".partial";
  // O_TRUNC: a partial file left by a killed process is simply started over.
  fd_ = ::open(partial_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    fail("cannot create {}: {}; check that the directory is writable or set SPLASH_HOME",
         partial_path_.string(), std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(partial_path_.c_str());
}

void AtomicFile::write(const void* data, std::size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      fail("cannot write {}: {}; free some disk space or set SPLASH_HOME to another disk",
           partial_path_.string(), std::strerror(errno));
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

void AtomicFile::commit() {
  if (committed_ || fd_ < 0) fail("internal error: AtomicFile::commit called twice");
  if (::fsync(fd_) != 0) {
    fail("cannot flush {} to disk: {}", partial_path_.string(), std::strerror(errno));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close {}: {}", partial_path_.string(), std::strerror(errno));
  if (::rename(partial_path_.c_str(), dest_.c_str()) != 0) {
    fail("cannot rename {} to {}: {}", partial_path_.string(), dest_.string(),
         std::strerror(errno));
  }
  committed_ = true;
  fsync_directory(dest_.has_parent_path() ? dest_.parent_path() : std::filesystem::path("."));
}

}  // namespace splash::hub
