// Host allowlist and API-key checks of the HTTP server (src/server/request_guard.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/request_guard.h"

namespace splash::server {
namespace {

TEST(RequestGuard, HostOfAuthority) {
  EXPECT_EQ(host_of_authority("localhost:8000"), "localhost");
  EXPECT_EQ(host_of_authority("LOCALHOST"), "localhost");
  EXPECT_EQ(host_of_authority("127.0.0.1:1"), "127.0.0.1");
  EXPECT_EQ(host_of_authority("[::1]:8000"), "[::1]");
  EXPECT_EQ(host_of_authority("[::1]"), "[::1]");
  EXPECT_EQ(host_of_authority(" example.com "), "example.com");
  EXPECT_EQ(host_of_authority("localhost.:80"), "localhost");
  EXPECT_EQ(host_of_authority("box_1.lan:65535"), "box_1.lan");
}

// Hostile values seen against the server (issue 12): none passes as a host.
TEST(RequestGuard, MalformedAuthoritiesHaveNoHost) {
  const std::string nul("localhost\0evil.com", 18);
  for (const std::string& bad : std::vector<std::string>{"", "[::1", "[]", "[::1].evil.com", "[::1]evil", "[::1]:", "[::1]:80x", "localhost:evil",
                                "localhost:", "localhost:123456", "localhost:65536", "localhost:80:80", "::1",
                                "local host", "localhost@evil.com", "evil.com/localhost", "localhost%00", ".", ":80",
                                "[fe80::1%eth0]", "localhost\r\n", nul})
    EXPECT_FALSE(host_of_authority(bad).has_value()) << "'" << bad << "'";
}

TEST(RequestGuard, DefaultAllowlistIsLoopbackOnly) {
  HostAllowlist allow({});
  for (const char* ok : {"localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LocalHost:1"})
    EXPECT_TRUE(allow.allows(ok)) << ok;
  for (const char* bad : {"evil.com", "evil.com:8000", "127.0.0.2", "localhost.evil.com", "127.0.0.1.nip.io", "",
                          "[::2]", "0.0.0.0", "localhost@evil.com", "[::1].evil.com", "localhost:evil"})
    EXPECT_FALSE(allow.allows(bad)) << bad;
}

TEST(RequestGuard, ExtraAllowedHosts) {
  HostAllowlist allow({"box.lan", "10.0.0.5:8000"});
  EXPECT_TRUE(allow.allows("box.lan:8000"));
  EXPECT_TRUE(allow.allows("10.0.0.5"));
  EXPECT_FALSE(allow.allows("other.lan"));
  EXPECT_NE(allow.describe().find("box.lan"), std::string::npos);
}

TEST(RequestGuard, PresentedKey) {
  EXPECT_EQ(presented_api_key("Bearer abc", ""), "abc");
  EXPECT_EQ(presented_api_key("bearer   abc", ""), "abc");
  EXPECT_EQ(presented_api_key("", "xyz"), "xyz");
  EXPECT_EQ(presented_api_key("Basic abc", "xyz"), "xyz");
  EXPECT_FALSE(presented_api_key("Basic abc", "").has_value());
  EXPECT_FALSE(presented_api_key("Bearer", "").has_value());
  EXPECT_FALSE(presented_api_key("", "").has_value());
}

TEST(RequestGuard, KeyComparison) {
  EXPECT_TRUE(api_key_matches("secret", "secret"));
  EXPECT_FALSE(api_key_matches("secret", "secreT"));
  EXPECT_FALSE(api_key_matches("secret", "secret "));
  EXPECT_FALSE(api_key_matches("secret", ""));
  EXPECT_FALSE(api_key_matches("secret", std::string("secret\0", 7)));
}

TEST(RequestGuard, PublicRoutes) {
  for (const char* path : {"/health", "/ready", "/", "/index.html", "/app.js", "/vendor/marked.min.js"})
    EXPECT_TRUE(is_public_route(path)) << path;
  for (const char* path : {"/v1/chat/completions", "/v1/models", "/v1", "/tokenize", "/detokenize", "/apply-template",
                           "/status"})
    EXPECT_FALSE(is_public_route(path)) << path;
}

}  // namespace
}  // namespace splash::server
