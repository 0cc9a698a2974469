// libFuzzer target for the HTTP transport: any bytes, cut into reads anywhere, with silences
// and a client that may stop taking the response, must come back as well-formed responses
// (read back by Beast's response parser, independent of our writer), in order, never a
// crash, hang or read out of bounds (built with ASan+UBSan, see `make fuzz`). No more
// responses than requests could have been sent, and a request the hooks refused is never
// followed by one read from its body.
#include <fuzzer/FuzzedDataProvider.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "server/http/connection.h"
#include "server/http/router.h"

namespace {

using namespace splash::server::http;
namespace bhttp = boost::beast::http;

[[noreturn]] void fail(const char* what, const std::string& output) {
  std::fprintf(stderr, "fuzz_http_request: invariant violated: %s\n%s\n", what, output.c_str());
  std::abort();
}

class FuzzStream final : public ByteStream {
 public:
  explicit FuzzStream(FuzzedDataProvider& data) : data_(data), takes_(data.ConsumeIntegralInRange<size_t>(0, 4096)) {
    if (data_.ConsumeBool()) takes_ = SIZE_MAX;
  }
  ReadResult read(char* buffer, size_t size, Clock::time_point) override {
    if (data_.remaining_bytes() == 0) return {Status::Closed};
    switch (data_.ConsumeIntegralInRange<int>(0, 15)) {
      case 0: return {Status::TimedOut};  // a silence as long as the deadline
      case 1: return {Status::Dropped};
      default: break;
    }
    const size_t want = std::min(size, data_.ConsumeIntegralInRange<size_t>(1, 512));
    const std::string bytes = data_.ConsumeBytesAsString(want);
    if (bytes.empty()) return {Status::Closed};
    std::memcpy(buffer, bytes.data(), bytes.size());
    sent_ += bytes.size();
    return {Status::Data, bytes.size()};
  }
  bool write(std::string_view data) override {
    if (shut_ || output.size() + data.size() > takes_) return false;
    output += data;
    return true;
  }
  void shutdown_write() override { shut_ = true; }

  std::string output;
  size_t sent_ = 0;

 private:
  FuzzedDataProvider& data_;
  size_t takes_;
  bool shut_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider data(bytes, size);
  Router router;
  router.get("/a", [](const Request&, Response& res) { res.set_content("a", "text/plain"); });
  router.post("/echo", [](const Request& req, Response& res) { res.set_content(req.body, "application/octet-stream"); });
  router.get("/items/{}", [](const Request& req, Response& res) { res.set_content(req.params.at(0), "text/plain"); });
  router.get("/s", [](const Request&, Response& res) {
    auto left = std::make_shared<int>(3);
    res.set_stream("text/event-stream", [left](Sink& sink) {
      if ((*left)-- == 0) return sink.done(), true;
      return sink.write("data: x\n\n");
    }, nullptr);
  });
  int requests = 0;
  bool refused_with_body = false;
  ConnectionHooks hooks;
  hooks.on_head = [&](const Request& head, Response& res) {
    if (refused_with_body) fail("a request was read after a refused one's unread body", "");
    ++requests;
    if (head.path != "/refuse") return false;
    res.status = 403;
    res.set_content("no", "text/plain");
    refused_with_body = head.has_header("Content-Length") || head.has_header("Transfer-Encoding");
    return true;
  };
  hooks.on_request = [&](Request& req, Response& res) {
    auto found = router.find(req.method, req.path);
    if (found.outcome != Router::Outcome::Found) {
      res.status = found.outcome == Router::Outcome::WrongMethod ? 405 : 404;
      return;
    }
    req.params = found.params;
    (*found.handler)(req, res);
  };
  hooks.on_error = [](const Request&, Response& res, int status, std::string_view message) {
    res.status = status;
    res.set_content(std::string(message), "text/plain");
  };
  std::vector<std::string> answered_methods;  // a HEAD's response has a length but no body
  hooks.on_answered = [&](const Request& req, const Response&) { answered_methods.push_back(req.method); };
  ConnectionOptions options;
  options.idle_timeout = options.head_timeout = options.body_silence = options.linger = std::chrono::milliseconds(0);
  options.header_limit = 2048;
  options.max_body = 4096;
  FuzzStream stream(data);
  serve_connection(stream, hooks, options);

  // Read back: every response complete and well-formed, except a last one cut short by a
  // client that stopped taking it.
  std::string out = stream.output;
  int answered = 0;
  while (!out.empty()) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.skip(static_cast<size_t>(answered) < answered_methods.size() && answered_methods[answered] == "HEAD");
    boost::beast::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(out), ec);
    if (out.rfind("HTTP/1.1 ", 0) != 0 && out.size() >= 9) fail("a response without a status line", stream.output);
    if (ec == bhttp::error::need_more || (!ec && !parser.is_done()))
      break;  // cut short by the client (or an HTTP/1.0 body that ends with the close)
    if (ec) fail("a response that does not parse", stream.output);
    if (parser.get().result_int() != 100) ++answered;
    out.erase(0, used);
  }
  if (answered > requests + 1) fail("more responses than requests", stream.output);  // +1: a framing error's answer
  return 0;
}
