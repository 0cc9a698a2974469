#include "server/request_guard.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>

namespace splash::server {

std::optional<std::string> host_of_authority(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  std::string authority(value);
  std::transform(authority.begin(), authority.end(), authority.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string host;
  std::string_view rest;
  if (!authority.empty() && authority.front() == '[') {  // an IPv6 literal: "[::1]" or "[::1]:8000"
    const size_t close = authority.find(']');
    if (close == std::string::npos || close == 1) return std::nullopt;
    const std::string_view inside = std::string_view(authority).substr(1, close - 1);
    if (!std::all_of(inside.begin(), inside.end(), [](unsigned char c) { return std::isxdigit(c) || c == ':' || c == '.'; }))
      return std::nullopt;
    host = authority.substr(0, close + 1);
    rest = std::string_view(authority).substr(close + 1);
  } else {  // a name or IPv4 address, at most one colon (before the port)
    const size_t colon = authority.find(':');
    if (colon != std::string::npos && authority.find(':', colon + 1) != std::string::npos) return std::nullopt;
    host = authority.substr(0, colon);
    rest = colon == std::string::npos ? std::string_view() : std::string_view(authority).substr(colon);
    // RFC 3986 reg-name, less percent-encoding and sub-delims: letters, digits, - . _ ~
    if (host.empty() || !std::all_of(host.begin(), host.end(), [](unsigned char c) {
          return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
        }))
      return std::nullopt;
    if (host.back() == '.') host.pop_back();  // "localhost." is localhost
    if (host.empty()) return std::nullopt;
  }
  if (!rest.empty()) {  // ":" and a port: 1-5 digits up to 65535
    const std::string_view port = rest.substr(1);
    if (rest.front() != ':' || port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); }) ||
        std::stoul(std::string(port)) > 65535)
      return std::nullopt;
  }
  return host;
}

HostAllowlist::HostAllowlist(std::vector<std::string> extra_hosts) : hosts_{"localhost", "127.0.0.1", "[::1]"} {
  for (auto& host : extra_hosts)
    if (const auto normalized = host_of_authority(host)) hosts_.push_back(*normalized);
}

bool HostAllowlist::allows(std::string_view host_header) const {
  const auto host = host_of_authority(host_header);
  return host && std::find(hosts_.begin(), hosts_.end(), *host) != hosts_.end();
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
