#pragma once
// One HTTP/1.1 exchange as the routes see it: the request (head and whole body) and the
// response they fill in, either a body known at once or one produced while it is sent (SSE
// streams, long replies probing their client). The transport (connection.h) frames them;
// the routes never see a socket.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splash::server::http {

using Fields = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality (header names, Expect and Connection tokens).
bool iequals(std::string_view a, std::string_view b);

struct Request {
  std::string method;  // as sent ("GET", "POST", ...); HEAD is routed as GET
  std::string target;  // as sent: the path and query
  std::string path;    // the target before '?', never percent-decoded
  std::string query;   // after '?', without it
  int version = 11;    // 10 or 11
  Fields headers;      // in the order sent, values as sent (no decoding)
  std::string body;
  std::vector<std::string> params;  // the route's captured path segments, percent-decoded

  // The first value of a header field (empty when absent).
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const { return header_count(name) > 0; }
  size_t header_count(std::string_view name) const;
};

// Where a produced body goes: each write is sent at once (a chunk of a chunked body); false
// when the client is gone. done() ends the body.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual bool write(std::string_view data) = 0;
  virtual void done() = 0;
};

struct Response {
  int status = 200;
  Fields headers;
  std::string body;
  std::string content_type;
  bool close_connection = false;  // answer, then close (a refusal whose body was not read)

  // A produced body: `produce` is called again and again until it calls sink.done() (the
  // body is complete) or returns false (abandon it, the connection is closed); `finished`
  // runs once after, told whether the whole body was sent.
  std::function<bool(Sink&)> produce;
  std::function<void(bool)> finished;

  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void set_stream(std::string type, std::function<bool(Sink&)> producer, std::function<void(bool)> on_finished) {
    content_type = std::move(type);
    produce = std::move(producer);
    finished = std::move(on_finished);
  }
};

using Handler = std::function<void(const Request&, Response&)>;

// The reason phrase of a status code ("Not Found"); "Unknown" for codes it does not know.
std::string_view reason_phrase(int status);

// A path segment with %XX decoded; nullopt for a malformed escape or a decoded NUL or '/'.
std::optional<std::string> percent_decode_segment(std::string_view segment);

}  // namespace splash::server::http
