#pragma once
// A file that appears under its final name complete or not at all: bytes go to
// "<dest>.partial", commit() flushes and renames, and destruction without commit()
// removes the partial file. Used for downloads, extracted models and stamps.
#include <cstddef>
#include <filesystem>
#include <string_view>

namespace splash::hub {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path dest);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync + rename over dest + fsync of the directory, so that after a crash dest is
  // either the old file or the complete new one.
  void commit();

  const std::filesystem::path& partial_path() const { return partial_path_; }

 private:
  std::filesystem::path dest_;
  std::filesystem::path partial_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace splash::hub
