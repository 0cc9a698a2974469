#include "hub/sha256.h"

#include <openssl/evp.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/error.h"

namespace splash::hub {

struct Sha256::State {
  EVP_MD_CTX* context = nullptr;
  bool finished = false;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->context = EVP_MD_CTX_new();
  if (state_->context == nullptr ||
      EVP_DigestInit_ex(state_->context, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(state_->context);
    fail("cannot start a SHA-256 digest (OpenSSL failed)");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->context); }

void Sha256::update(const void* data, std::size_t size) {
  if (state_->finished) fail("internal error: Sha256::update after finish_hex");
  if (size == 0) return;
  if (EVP_DigestUpdate(state_->context, data, size) != 1) fail("SHA-256 update failed (OpenSSL)");
}

std::string Sha256::finish_hex() {
  if (state_->finished) fail("internal error: Sha256::finish_hex called twice");
  state_->finished = true;
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(state_->context, digest.data(), &length) != 1) {
    fail("SHA-256 finish failed (OpenSSL)");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  return hasher.finish_hex();
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {} to check its SHA-256: {}", path.string(), std::strerror(errno));
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hasher.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) fail("read error in {} while checking its SHA-256", path.string());
  return hasher.finish_hex();
}

}  // namespace splash::hub
