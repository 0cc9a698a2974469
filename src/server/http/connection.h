#pragma once
// One HTTP/1.1 connection, from its first byte to its close: requests framed by Boost.Beast's
// parser (strict: conflicting lengths, bad chunks, stray bytes are errors, never guesses),
// answered in order (pipelined requests included, each after the one before), responses
// framed here (a Content-Length, or chunked for a produced body). Deadlines bound every wait:
// an idle keep-alive, a request head (counted from its first byte, not per read), a body's
// silences. A refusal whose body was not read, a framing error and every close are followed
// by a lingering close (our side shut, the client's bytes read and dropped for a moment), so
// the answer is not lost to a reset and unread bytes are never taken for a next request. A
// client that half-closes after its request still gets its response.
//
// The bytes come through ByteStream, so tests and the fuzzer drive a connection from memory.
#include <chrono>
#include <cstddef>
#include <functional>
#include <string_view>

#include "server/http/message.h"

namespace splash::server::http {

using Clock = std::chrono::steady_clock;

class ByteStream {
 public:
  enum class Status {
    Data,      // `bytes` > 0 were read
    Closed,    // the client closed its side (or the connection failed)
    TimedOut,  // nothing came before the deadline
    Dropped,   // the server wants the connection back (shutting down, or the pool needs it)
  };
  struct ReadResult {
    Status status;
    size_t bytes = 0;
  };
  virtual ~ByteStream() = default;
  virtual ReadResult read(char* buffer, size_t size, Clock::time_point deadline) = 0;
  // A read while lingering before a close: a dropped connection still lingers a moment, so
  // its last answer is not lost to a reset.
  virtual ReadResult read_to_linger(char* buffer, size_t size, Clock::time_point deadline) {
    return read(buffer, size, deadline);
  }
  // All of `data`, or false when the client is gone or takes it too slowly (no progress for
  // a while, or less than a minimum rate overall).
  virtual bool write(std::string_view data) = 0;
  virtual void shutdown_write() = 0;

  // What the connection is doing, for the listener: waiting for a request (idle, or lingering
  // before a close), reading one, or answering one (never dropped then).
  enum class Phase { Idle, Reading, Answering };
  virtual void set_phase(Phase) {}
  // A response was sent and the connection waits for the client's next request (nothing of
  // it read yet): the listener may take it back if others wait for a thread.
  virtual void kept_alive() {}
  // No keep-alive once the server is stopping.
  virtual bool stopping() const { return false; }
};

struct ConnectionOptions {
  size_t header_limit = size_t{64} << 10;  // a request head's bytes
  size_t max_header_fields = 100;          // no real client sends more (browsers ~20, SDKs ~15)
  size_t max_body = size_t{8} << 20;       // refused earlier by on_head; the parser's own bound
  std::chrono::milliseconds idle_timeout{5000};    // a keep-alive connection's wait for its next request
  std::chrono::milliseconds head_timeout{10000};   // first byte to the end of the head
  std::chrono::milliseconds body_silence{10000};   // the longest pause inside a body
  size_t body_min_rate = size_t{64} << 10;         // bytes a second: a body's whole time is bounded too
  std::chrono::milliseconds linger{2000};          // reading and dropping before a close
};

struct ConnectionHooks {
  // After the head, before a byte of the body is read: fill `res` and return true to answer
  // without the body (the connection is then closed if a body was announced).
  std::function<bool(const Request& head, Response& res)> on_head;
  // The whole request: fill the response (the request's params are the hook's to set).
  std::function<void(Request& req, Response& res)> on_request;
  // A response for an error the transport found itself (a malformed request, 408, 413, 431, 500).
  // A produced body's `produce` must block a little (wait for its next piece) when it has
  // nothing to write, or its connection spins.
  std::function<void(const Request& req, Response& res, int status, std::string_view message)> on_error;
  // After each response has been sent (or abandoned).
  std::function<void(const Request& req, const Response& res)> on_answered;
  // The connection is over, whatever request it was reading abandoned.
  std::function<void()> on_closed;
};

void serve_connection(ByteStream& stream, const ConnectionHooks& hooks, const ConnectionOptions& options);

}  // namespace splash::server::http
