#include "server/request_guard.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>

namespace splash::server {

std::string host_without_port(std::string_view host_header) {
  std::string host(host_header);
  while (!host.empty() && std::isspace(static_cast<unsigned char>(host.back()))) host.pop_back();
  while (!host.empty() && std::isspace(static_cast<unsigned char>(host.front()))) host.erase(host.begin());
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  if (!host.empty() && host.front() == '[') {  // IPv6 literal: "[::1]:8000"
    const size_t close = host.find(']');
    return close == std::string::npos ? host : host.substr(0, close + 1);
  }
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos && host.find(':') == colon) host.resize(colon);
  if (!host.empty() && host.back() == '.') host.pop_back();  // "localhost." is localhost
  return host;
}

HostAllowlist::HostAllowlist(std::vector<std::string> extra_hosts) : hosts_{"localhost", "127.0.0.1", "[::1]"} {
  for (auto& host : extra_hosts) {
    std::string normalized = host_without_port(host);
    if (!normalized.empty()) hosts_.push_back(normalized);
  }
}

bool HostAllowlist::allows(std::string_view host_header) const {
  const std::string host = host_without_port(host_header);
  return std::find(hosts_.begin(), hosts_.end(), host) != hosts_.end();
}

std::string HostAllowlist::describe() const {
  std::string out;
  for (const auto& host : hosts_) out += (out.empty() ? "" : ", ") + host;
  return out;
}

std::optional<std::string> presented_api_key(std::string_view authorization, std::string_view x_api_key) {
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() > kBearer.size()) {
    std::string scheme(authorization.substr(0, kBearer.size()));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    if (scheme == kBearer) {
      std::string_view key = authorization.substr(kBearer.size());
      while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
      return std::string(key);
    }
  }
  if (!x_api_key.empty()) return std::string(x_api_key);
  return std::nullopt;
}

bool api_key_matches(std::string_view expected, std::string_view presented) {
  // Hash both first so the comparison is over fixed-length digests.
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(presented.data()), presented.size(), b);
  return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

bool is_public_route(std::string_view path) {
  if (path == "/health" || path == "/ready") return true;
  // The web page and its static files; every API route lives under these prefixes.
  const bool api = path.starts_with("/v1/") || path == "/v1" || path == "/tokenize" || path == "/detokenize" ||
                   path == "/apply-template" || path == "/status" || path == "/metrics";
  return !api;
}

}  // namespace splash::server
