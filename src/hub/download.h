#pragma once
// Fetch one URL into one file with libcurl (https://, http://, file://).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/progress.h"

namespace splash::hub {

struct DownloadOptions {
  long connect_timeout_seconds = 30;
  // A transfer slower than this many bytes/s for low_speed_seconds is abandoned, so a
  // stalled connection fails with a message instead of hanging forever.
  long low_speed_bytes_per_second = 1024;
  long low_speed_seconds = 60;
  // Refuse a body larger than this (0 = no limit): a wrong URL must not fill the disk.
  std::uint64_t max_bytes = 0;
  // Extra request headers ("Name: value"), e.g. a hub's Authorization. libcurl keeps them
  // from a redirect to another host (a hub's CDN gets no token).
  std::vector<std::string> headers;
};

struct DownloadResult {
  std::uint64_t bytes = 0;
  std::string sha256;  // of the bytes written, computed while downloading
};

// Writes the body to "<dest>.partial" and renames it to dest only after the whole
// body arrived and was flushed to disk; on any failure the partial file is removed,
// dest is left as it was, and splash::Error says what went wrong. Follows redirects;
// HTTP errors (4xx/5xx) are failures. Two callers must not download to the same dest
// at once (the partial name is fixed); model_cache holds a lock for that.
DownloadResult download_file(const std::string& url, const std::filesystem::path& dest,
                             const ProgressFn& progress, const DownloadOptions& options = {});

// A small GET into memory (a JSON API: a server's /v1/models), with extra request headers
// ("Name: value"). The body is capped at max_bytes. Throws splash::Error when nothing answers
// (refused, timed out, bad URL); an HTTP error status is returned, not thrown.
struct HttpResponse {
  long status = 0;
  std::string body;
};
HttpResponse http_get(const std::string& url, const std::vector<std::string>& headers, long timeout_seconds = 10,
                      std::uint64_t max_bytes = 1 << 20);

}  // namespace splash::hub
