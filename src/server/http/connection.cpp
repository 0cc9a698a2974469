#include "server/http/connection.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>

namespace splash::server::http {
namespace {

namespace bhttp = boost::beast::http;
using Parser = bhttp::request_parser<bhttp::string_body>;

constexpr size_t kReadChunk = size_t{16} << 10;

// The head as the hooks see it.
Request head_of(const Parser& parser) {
  const auto& message = parser.get();
  Request req;
  req.method = std::string(message.method_string());
  req.target = std::string(message.target());
  const size_t question = req.target.find('?');
  req.path = req.target.substr(0, question);
  if (question != std::string::npos) req.query = req.target.substr(question + 1);
  req.version = message.version();
  for (const auto& field : message) req.headers.emplace_back(field.name_string(), field.value());
  return req;
}

bool has_no_body(int status, const Request& req) {
  return req.method == "HEAD" || status == 204 || status == 304 || (status >= 100 && status < 200);
}

// A header value we send: CR and LF would split it into two headers, so they never pass.
bool safe_field(std::string_view text) { return text.find_first_of("\r\n") == std::string_view::npos; }

std::string response_head(const Request& req, const Response& res, bool keep_alive, bool chunked) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\n", res.status, reason_phrase(res.status));
  for (const auto& [name, value] : res.headers)
    if (safe_field(name) && safe_field(value) && !iequals(name, "Connection") && !iequals(name, "Content-Length") &&
        !iequals(name, "Transfer-Encoding"))
      head += fmt::format("{}: {}\r\n", name, value);
  if (!res.content_type.empty() && safe_field(res.content_type))
    head += fmt::format("Content-Type: {}\r\n", res.content_type);
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  else if (!res.produce && !(res.status == 204 || res.status == 304 || res.status < 200))
    head += fmt::format("Content-Length: {}\r\n", res.body.size());
  if (!keep_alive) head += "Connection: close\r\n";
  else if (req.version == 10) head += "Connection: keep-alive\r\n";
  head += "\r\n";
  return head;
}

// A produced body's bytes, chunked (HTTP/1.1) or as they are (HTTP/1.0, ended by the close).
class BodySink final : public Sink {
 public:
  BodySink(ByteStream& stream, bool chunked) : stream_(stream), chunked_(chunked) {}
  bool write(std::string_view data) override {
    if (failed_ || done_) return false;
    if (data.empty()) return true;
    const bool ok = chunked_ ? stream_.write(fmt::format("{:x}\r\n{}\r\n", data.size(), data)) : stream_.write(data);
    failed_ = !ok;
    return ok;
  }
  void done() override {
    if (done_ || failed_) return;
    if (chunked_ && !stream_.write("0\r\n\r\n")) failed_ = true;
    done_ = true;
  }
  bool is_done() const { return done_; }
  bool failed() const { return failed_; }

 private:
  ByteStream& stream_;
  bool chunked_;
  bool done_ = false, failed_ = false;
};

// Sends the response; whether the connection may serve another request.
bool send_response(ByteStream& stream, const Request& req, Response& res, bool keep_alive) {
  const bool bodiless = has_no_body(res.status, req);
  if (res.produce && !bodiless && req.version == 10) keep_alive = false;  // the close ends the body
  keep_alive = keep_alive && !res.close_connection;
  const bool chunked = res.produce && !bodiless && req.version == 11;
  std::string head = response_head(req, res, keep_alive, chunked);
  if (!res.produce) {
    if (!bodiless) head += res.body;
    return stream.write(head) && keep_alive;
  }
  bool sent = stream.write(head);
  BodySink sink(stream, chunked);
  if (sent && bodiless) sink.done();
  try {
    while (sent && !sink.is_done()) {
      if (!res.produce(sink) || sink.failed()) sent = false;
    }
  } catch (const std::exception&) {
    sent = false;  // the body is cut short; the client sees it end without its last chunk
  }
  if (res.finished) res.finished(sent && sink.is_done());
  return sent && keep_alive;
}

// Our side shut, then the client's bytes read and dropped until it closes or `linger`
// passes: the answer is not lost to a reset caused by bytes we never read.
void lingering_close(ByteStream& stream, std::chrono::milliseconds linger) {
  stream.shutdown_write();
  stream.set_phase(ByteStream::Phase::Idle);  // nothing is owed any more: the pool may take it back
  const auto until = Clock::now() + linger;
  char sink[kReadChunk];
  while (stream.read_to_linger(sink, sizeof sink, until).status == ByteStream::Status::Data) {
  }
}

std::string framing_message(const boost::beast::error_code& ec) {
  return fmt::format("malformed HTTP request: {}", ec.message());
}

}  // namespace

void serve_connection(ByteStream& stream, const ConnectionHooks& hooks, const ConnectionOptions& options) {
  struct OnClosed {
    const ConnectionHooks& hooks;
    ~OnClosed() {
      if (hooks.on_closed) hooks.on_closed();
    }
  } on_closed{hooks};
  std::string in;  // read and not yet parsed (the start of a pipelined request, say)
  char buffer[kReadChunk];
  // Answers an error the transport found, then closes.
  auto fail = [&](const Request& req, int status, std::string_view message) {
    Response res;
    hooks.on_error(req, res, status, message);
    res.close_connection = true;
    stream.set_phase(ByteStream::Phase::Answering);
    send_response(stream, req, res, false);
    if (hooks.on_answered) hooks.on_answered(req, res);
    lingering_close(stream, options.linger);
  };

  for (;;) {
    stream.set_phase(ByteStream::Phase::Idle);
    Parser parser;
    parser.header_limit(static_cast<std::uint32_t>(options.header_limit));
    parser.body_limit(boost::none);  // set once the head is accepted (on_head refuses long ones)
    parser.eager(false);             // stop after the head
    boost::beast::error_code ec;
    // The parser bounds the head only within one put(), so the head's bytes are counted
    // here across them (a head sent in many reads, each parsed whole, would grow unbounded);
    // so are bytes that a body's chunk framing holds unparsed.
    size_t head_bytes = 0;
    auto feed = [&] {
      const size_t used = parser.put(boost::asio::buffer(in.data(), in.size()), ec);
      if (!parser.is_header_done()) head_bytes += used;
      in.erase(0, used);
      if (ec == bhttp::error::need_more) ec = {};
      if (!ec && !parser.is_header_done() && head_bytes + in.size() > options.header_limit)
        ec = bhttp::error::header_limit;
      if (!ec && parser.is_header_done() && !parser.is_done() && used == 0 && in.size() > options.header_limit)
        ec = bhttp::error::bad_chunk;  // a chunk header or trailer longer than any head
    };
    // Reads more of the request; false when the connection is over (answered or closed).
    bool started = !in.empty();
    Clock::time_point deadline = started ? Clock::now() + options.head_timeout : Clock::now() + options.idle_timeout;
    auto read_more = [&](std::optional<Clock::time_point> until) {
      if (until) deadline = *until;
      const auto got = stream.read(buffer, sizeof buffer, deadline);
      switch (got.status) {
        case ByteStream::Status::Data:
          if (!started) {
            started = true;
            stream.set_phase(ByteStream::Phase::Reading);
            deadline = Clock::now() + options.head_timeout;
          }
          in.append(buffer, got.bytes);
          return true;
        case ByteStream::Status::Closed: return false;
        case ByteStream::Status::TimedOut:
        case ByteStream::Status::Dropped:
          // An idle connection just closes; a request cut short is told why.
          if (started)
            fail(Request{}, got.status == ByteStream::Status::TimedOut ? 408 : 503,
                 got.status == ByteStream::Status::TimedOut ? "the request was not sent in time"
                                                            : "the server needs this connection back; send again");
          else
            lingering_close(stream, std::chrono::milliseconds(0));
          return false;
      }
      return false;
    };
    if (started) stream.set_phase(ByteStream::Phase::Reading);

    // The head.
    while (!parser.is_header_done()) {
      if (!in.empty()) {
        feed();
        if (ec == bhttp::error::header_limit)
          return fail(Request{}, 431, fmt::format("the request head is larger than {} bytes", options.header_limit));
        if (ec) return fail(Request{}, 400, framing_message(ec));
        if (parser.is_header_done()) break;
      }
      if (!read_more(std::nullopt)) return;
    }
    Request req = head_of(parser);
    if (req.headers.size() > options.max_header_fields)
      return fail(req, 431, fmt::format("more than {} header fields", options.max_header_fields));
    if (req.version != 10 && req.version != 11) return fail(req, 505, "only HTTP/1.0 and HTTP/1.1 are spoken here");
    if (req.path.empty() || req.path[0] != '/') return fail(req, 400, "the request target must be a path ('/...')");
    // A body whose length cannot be known (RFC 9112 6.3): 400, then close.
    if (req.has_header("Transfer-Encoding") && !parser.chunked())
      return fail(req, 400, "a Transfer-Encoding whose last coding is not chunked");
    const bool announces_body = parser.chunked() || parser.content_length().value_or(0) > 0;
    {
      Response res;
      if (hooks.on_head && hooks.on_head(req, res)) {
        if (announces_body) res.close_connection = true;  // its bytes must not be read as a request
        stream.set_phase(ByteStream::Phase::Answering);
        const bool keep = send_response(stream, req, res, parser.keep_alive() && !stream.stopping());
        if (hooks.on_answered) hooks.on_answered(req, res);
        if (keep) {
          if (in.empty()) stream.kept_alive();
          continue;
        }
        return lingering_close(stream, options.linger);
      }
    }
    // The body (a declared length is checked here: the parser checks its limit only on chunks).
    if (parser.content_length().value_or(0) > options.max_body)
      return fail(req, 413, fmt::format("the request body is larger than {} bytes", options.max_body));
    if (const std::string expect = req.header("Expect"); !expect.empty()) {
      if (!iequals(expect, "100-continue") || req.header_count("Expect") != 1)
        return fail(req, 417, "the only expectation this server meets is 'Expect: 100-continue'");
      if (req.version == 11 && announces_body && !stream.write("HTTP/1.1 100 Continue\r\n\r\n")) return;
    }

    // The body: no pause longer than body_silence, and all of it at body_min_rate at least.
    parser.body_limit(options.max_body);
    parser.eager(true);
    const size_t body_bytes = parser.chunked() ? options.max_body : parser.content_length().value_or(0);
    const auto body_deadline = Clock::now() + options.head_timeout +
                               std::chrono::milliseconds(body_bytes * 1000 / std::max<size_t>(1, options.body_min_rate));
    while (!parser.is_done()) {
      if (!in.empty()) {
        feed();
        if (ec == bhttp::error::body_limit)
          return fail(req, 413, fmt::format("the request body is larger than {} bytes", options.max_body));
        if (ec) return fail(req, 400, framing_message(ec));
        if (parser.is_done()) break;
      }
      if (!read_more(std::min(Clock::now() + options.body_silence, body_deadline))) return;
    }
    req.body = std::move(parser.get().body());
    const bool keep_alive = parser.keep_alive();  // every Connection field counted, not the first

    stream.set_phase(ByteStream::Phase::Answering);
    Response res;
    try {
      hooks.on_request(req, res);
    } catch (const std::exception& e) {
      res = Response{};
      hooks.on_error(req, res, 500, std::string("internal error: ") + e.what());
    }
    const bool keep = send_response(stream, req, res, keep_alive && !stream.stopping());
    if (hooks.on_answered) hooks.on_answered(req, res);
    if (!keep) return lingering_close(stream, options.linger);
    if (in.empty()) stream.kept_alive();
  }
}

}  // namespace splash::server::http
