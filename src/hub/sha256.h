#pragma once
// SHA-256 as lowercase hex, streaming so that a 100 MB model is hashed while it is
// written instead of being read back a second time.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace splash::hub {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Ends the digest; the object must not be updated afterwards.
  std::string finish_hex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(std::string_view bytes);
// Throws splash::Error when the file cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace splash::hub
