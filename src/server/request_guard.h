#pragma once
// The checks every request passes before routing: the Host header against the allowlist
// (DNS-rebinding defence for a server on loopback) and the API key (constant-time).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splash::server {

// The host of a Host header value that is exactly an authority (RFC 3986, no userinfo): a
// name or IPv4 address of letters, digits, - . _ ~ (a trailing dot dropped), or a bracketed
// IPv6 literal, then optionally ':' and a port of 1-5 digits up to 65535. Lower-cased,
// without the port ("[::1]" keeps its brackets); nullopt for anything else (two colons, a
// port that is not a number, text after "]", a NUL, spaces inside).
std::optional<std::string> host_of_authority(std::string_view host_header);

class HostAllowlist {
 public:
  explicit HostAllowlist(std::vector<std::string> extra_hosts);
  bool allows(std::string_view host_header) const;
  std::string describe() const;

 private:
  std::vector<std::string> hosts_;
};

// The key a request presents: "Authorization: Bearer K" or "x-api-key: K".
std::optional<std::string> presented_api_key(std::string_view authorization, std::string_view x_api_key);

// Compares without leaking where they differ or how long the expected key is.
bool api_key_matches(std::string_view expected, std::string_view presented);

// Routes anyone may call even when an API key is set: probes and the web page's files.
bool is_public_route(std::string_view path);

}  // namespace splash::server
