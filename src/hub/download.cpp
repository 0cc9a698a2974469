#include "hub/download.h"

#include <curl/curl.h>

#include <chrono>
#include <exception>
#include <mutex>

#include "common/error.h"
#include "hub/atomic_file.h"
#include "hub/sha256.h"

namespace splash::hub {

namespace {

using Clock = std::chrono::steady_clock;

void init_curl_once() {
  // curl_global_init is not thread-safe; curl_easy_init would call it lazily and racily.
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("cannot initialise libcurl");
  });
}

struct Transfer {
  AtomicFile* file = nullptr;
  Sha256 hasher;
  std::uint64_t bytes = 0;
  std::uint64_t max_bytes = 0;
  const ProgressFn* progress = nullptr;
  Clock::time_point started = Clock::now();
  Clock::time_point last_report{};
  // curl is C: an exception must not unwind through it, so callbacks park it here and
  // return an abort code; it is rethrown once curl_easy_perform has returned.
  std::exception_ptr error;
  bool too_large = false;

  double rate() const {
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
  }
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  const size_t length = size * count;
  if (transfer.max_bytes != 0 && transfer.bytes + length > transfer.max_bytes) {
    transfer.too_large = true;
    return 0;  // any short count makes curl abort with CURLE_WRITE_ERROR
  }
  try {
    transfer.file->write(data, length);
    transfer.hasher.update(data, length);
    transfer.bytes += length;
  } catch (...) {
    transfer.error = std::current_exception();
    return 0;
  }
  return length;
}

int on_progress(void* user, curl_off_t total, curl_off_t /*done*/, curl_off_t, curl_off_t) {
  auto& transfer = *static_cast<Transfer*>(user);
  if (transfer.progress == nullptr || !*transfer.progress) return 0;
  // curl calls this many times a second; the user needs a few updates, not thousands.
  const auto now = Clock::now();
  if (now - transfer.last_report < std::chrono::milliseconds(200)) return 0;
  transfer.last_report = now;
  try {
    (*transfer.progress)(Progress{.stage = "downloading",
                                  .done_bytes = transfer.bytes,
                                  .total_bytes = static_cast<std::uint64_t>(total > 0 ? total : 0),
                                  .bytes_per_second = transfer.rate()});
  } catch (...) {
    transfer.error = std::current_exception();
    return 1;  // non-zero aborts the transfer
  }
  return 0;
}

struct CurlHandle {
  CURL* handle = curl_easy_init();
  ~CurlHandle() { curl_easy_cleanup(handle); }
};

template <typename Value>
void set_option(CURL* curl, CURLoption option, Value value) {
  if (curl_easy_setopt(curl, option, value) != CURLE_OK) {
    fail("libcurl rejected an option ({}); is libcurl older than 7.85?", static_cast<int>(option));
  }
}

}  // namespace

DownloadResult download_file(const std::string& url, const std::filesystem::path& dest,
                             const ProgressFn& progress, const DownloadOptions& options) {
  init_curl_once();
  CurlHandle curl;
  if (curl.handle == nullptr) fail("cannot start a download of {}: curl_easy_init failed", url);

  AtomicFile file(dest);
  Transfer transfer;
  transfer.file = &file;
  transfer.max_bytes = options.max_bytes;
  transfer.progress = &progress;

  char curl_message[CURL_ERROR_SIZE] = {};
  CURL* handle = curl.handle;
  set_option(handle, CURLOPT_URL, url.c_str());
  set_option(handle, CURLOPT_ERRORBUFFER, curl_message);
  // Only protocols a model can honestly come from; a redirect may never lead to file://.
  set_option(handle, CURLOPT_PROTOCOLS_STR, "https,http,file");
  set_option(handle, CURLOPT_REDIR_PROTOCOLS_STR, "https,http");
  set_option(handle, CURLOPT_FOLLOWLOCATION, 1L);
  set_option(handle, CURLOPT_MAXREDIRS, 10L);
  set_option(handle, CURLOPT_FAILONERROR, 1L);
  set_option(handle, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for DNS timeouts in a threaded program
  set_option(handle, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_seconds);
  set_option(handle, CURLOPT_LOW_SPEED_LIMIT, options.low_speed_bytes_per_second);
  set_option(handle, CURLOPT_LOW_SPEED_TIME, options.low_speed_seconds);
  set_option(handle, CURLOPT_USERAGENT, "splash/0.1");
  set_option(handle, CURLOPT_WRITEFUNCTION, on_body);
  set_option(handle, CURLOPT_WRITEDATA, &transfer);
  set_option(handle, CURLOPT_XFERINFOFUNCTION, on_progress);
  set_option(handle, CURLOPT_XFERINFODATA, &transfer);
  set_option(handle, CURLOPT_NOPROGRESS, 0L);
  if (options.max_bytes != 0) {
    // Lets curl refuse an oversized body from its Content-Length before any byte is written.
    set_option(handle, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options.max_bytes));
  }

  curl_slist* headers = nullptr;
  for (const auto& header : options.headers) headers = curl_slist_append(headers, header.c_str());
  if (headers) set_option(handle, CURLOPT_HTTPHEADER, headers);
  const CURLcode code = curl_easy_perform(handle);
  curl_slist_free_all(headers);
  if (transfer.error) std::rethrow_exception(transfer.error);
  if (transfer.too_large || code == CURLE_FILESIZE_EXCEEDED) {
    fail(
        "download of {} failed: the server sent more than the expected {} bytes; "
        "the URL is probably wrong, pass --model PATH to use a local file",
        url, options.max_bytes);
  }
  if (code == CURLE_HTTP_RETURNED_ERROR) {
    long status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    fail(
        "download of {} failed: the server answered HTTP {}; the file may have moved, "
        "pass --model PATH to use a local file",
        url, status);
  }
  if (code != CURLE_OK) {
    const std::string reason = curl_message[0] != '\0' ? curl_message : curl_easy_strerror(code);
    // A file:// URL has no network to blame; point at the path instead.
    const char* hint = url.starts_with("file:") ? "check the path" : "check the network";
    fail("download of {} failed: {}; {} or pass --model PATH", url, reason, hint);
  }

  file.commit();
  if (progress) {
    progress(Progress{.stage = "downloading",
                      .done_bytes = transfer.bytes,
                      .total_bytes = transfer.bytes,
                      .bytes_per_second = transfer.rate(),
                      .finished = true});
  }
  return DownloadResult{.bytes = transfer.bytes, .sha256 = transfer.hasher.finish_hex()};
}

namespace {

struct MemoryBody {
  std::string* body;
  std::uint64_t max_bytes;
};

size_t on_memory_body(char* data, size_t size, size_t count, void* user) {
  auto& sink = *static_cast<MemoryBody*>(user);
  const size_t length = size * count;
  if (sink.body->size() + length > sink.max_bytes) return 0;  // aborts: too large
  sink.body->append(data, length);
  return length;
}

}  // namespace

HttpResponse http_get(const std::string& url, const std::vector<std::string>& headers, long timeout_seconds,
                      std::uint64_t max_bytes) {
  init_curl_once();
  CURL* curl = curl_easy_init();
  if (!curl) fail("cannot initialise libcurl");
  HttpResponse response;
  MemoryBody sink{&response.body, max_bytes};
  curl_slist* list = nullptr;
  for (const auto& header : headers) list = curl_slist_append(list, header.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_memory_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_seconds);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, timeout_seconds);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  if (code != CURLE_OK) fail("{}: {}", url, curl_easy_strerror(code));
  return response;
}

}  // namespace splash::hub
