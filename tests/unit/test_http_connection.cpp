// The HTTP transport driven from memory: framing (pipelining, bodies, chunked replies,
// HTTP/1.0), refusals that close without reading the body, deadlines, and the router.
// Responses are read back with Boost.Beast's response parser, a parser independent of the
// writer under test.
#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "server/http/connection.h"
#include "server/http/router.h"

namespace splash::server::http {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

// A client in memory: what it sends, in pieces, with pauses between them; then it closes
// (or stays silent). It may stop taking the response after some bytes.
class MemoryStream final : public ByteStream {
 public:
  struct Step {  // bytes sent, or (with no bytes) a pause
    Step(std::string bytes) : text(std::move(bytes)) {}
    Step(const char* bytes) : text(bytes) {}
    Step(std::chrono::milliseconds wait) : pause(wait) {}
    std::string text;
    std::chrono::milliseconds pause{0};
  };
  std::deque<Step> input;
  bool silent_at_end = false;  // after the input: silence (reads time out) rather than a close
  size_t takes_bytes = SIZE_MAX;  // writes fail once the response passes this many bytes
  std::string output;
  bool shut = false;

  ReadResult read(char* buffer, size_t size, Clock::time_point deadline) override {
    while (!input.empty() && input.front().text.empty()) {
      const auto until = Clock::now() + input.front().pause;
      if (until > deadline) {
        std::this_thread::sleep_until(deadline);
        input.front().pause = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        return {Status::TimedOut};
      }
      std::this_thread::sleep_until(until);
      input.pop_front();
    }
    if (input.empty()) {
      if (!silent_at_end) return {Status::Closed};
      std::this_thread::sleep_until(deadline);
      return {Status::TimedOut};
    }
    auto& text = input.front().text;
    const size_t n = std::min(size, text.size());
    std::memcpy(buffer, text.data(), n);
    text.erase(0, n);
    if (text.empty()) input.pop_front();
    return {Status::Data, n};
  }
  bool write(std::string_view data) override {
    if (shut || output.size() + data.size() > takes_bytes) return false;
    output += data;
    return true;
  }
  void shutdown_write() override { shut = true; }
};

struct Answer {
  int status = 0;
  std::string body;
  bhttp::response<bhttp::string_body> message;
};

// Every response in `bytes`, in order (a 100 Continue is one too).
std::vector<Answer> responses(std::string bytes) {
  std::vector<Answer> out;
  while (!bytes.empty()) {
    bhttp::response_parser<bhttp::string_body> parser;
    boost::beast::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(bytes), ec);
    size_t total = used;
    while (!ec && !parser.is_done() && total < bytes.size()) {
      const size_t more = parser.put(boost::asio::buffer(bytes.data() + total, bytes.size() - total), ec);
      if (more == 0) break;
      total += more;
    }
    if (!parser.is_done()) {
      parser.put_eof(ec);  // a body ended by the close (HTTP/1.0)
      total = bytes.size();
    }
    EXPECT_FALSE(ec && ec != bhttp::error::need_more) << ec.message() << " in " << bytes;
    if (!parser.is_done()) break;
    Answer answer;
    answer.message = parser.release();
    answer.status = answer.message.result_int();
    answer.body = answer.message.body();
    out.push_back(std::move(answer));
    bytes.erase(0, total);
  }
  return out;
}

struct Harness {
  Router router;
  ConnectionHooks hooks;
  ConnectionOptions options;
  std::vector<bool> stream_finished;
  int closed = 0;

  Harness() {
    router.get("/hello", [](const Request&, Response& res) { res.set_content("hi", "text/plain"); });
    router.post("/echo", [](const Request& req, Response& res) { res.set_content(req.body, "text/plain"); });
    router.get("/header", [](const Request& req, Response& res) { res.set_content(req.header("X-Key"), "text/plain"); });
    router.get("/items/{}", [](const Request& req, Response& res) { res.set_content(req.params.at(0), "text/plain"); });
    router.get("/stream", [this](const Request&, Response& res) {
      auto left = std::make_shared<int>(3);
      res.set_stream(
          "text/event-stream",
          [left](Sink& sink) {
            if (*left == 0) return sink.done(), true;
            return sink.write("data: " + std::to_string((*left)--) + "\n\n");
          },
          [this](bool whole) { stream_finished.push_back(whole); });
    });
    hooks.on_head = [](const Request& head, Response& res) {
      if (!head.has_header("X-Refuse")) return false;
      res.status = 403;
      res.set_content("refused", "text/plain");
      return true;
    };
    hooks.on_request = [this](Request& req, Response& res) {
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
    hooks.on_closed = [this] { ++closed; };
    options.idle_timeout = 200ms;
    options.head_timeout = 300ms;
    options.body_silence = 200ms;
    options.linger = 0ms;
    options.max_body = 1 << 20;
  }

  std::vector<Answer> serve(MemoryStream& stream) {
    serve_connection(stream, hooks, options);
    return responses(stream.output);
  }
  std::vector<Answer> serve(std::vector<MemoryStream::Step> steps) {
    MemoryStream stream;
    stream.input.assign(steps.begin(), steps.end());
    return serve(stream);
  }
};

TEST(HttpConnection, PipelinedRequestsAreAnsweredInOrder) {
  Harness h;
  const auto out = h.serve({std::string("GET /hello HTTP/1.1\r\nHost: a\r\n\r\n"
                                        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nfirst"
                                        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nsecond"
                                        "GET /items/a%20b HTTP/1.1\r\nHost: a\r\n\r\n")});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].body, "hi");
  EXPECT_EQ(out[1].body, "first");
  EXPECT_EQ(out[2].body, "second");
  EXPECT_EQ(out[3].body, "a b");
  EXPECT_EQ(h.closed, 1);
}

TEST(HttpConnection, ARequestSplitAnywhereIsTheSameRequest) {
  const std::string request = "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world";
  for (size_t cut = 1; cut < request.size(); ++cut) {
    Harness h;
    const auto out = h.serve({request.substr(0, cut), request.substr(cut)});
    ASSERT_EQ(out.size(), 1u) << cut;
    EXPECT_EQ(out[0].body, "hello world") << cut;
  }
}

TEST(HttpConnection, AClientThatHalfClosesStillGetsItsResponse) {
  Harness h;  // the input ends with a close right after the request
  const auto out = h.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].body, "abc");
}

TEST(HttpConnection, ARefusedHeadClosesWithoutReadingTheBody) {
  Harness h;
  MemoryStream stream;
  const std::string smuggled = "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n";
  stream.input = {"POST /echo HTTP/1.1\r\nHost: a\r\nX-Refuse: 1\r\nContent-Length: " + std::to_string(smuggled.size()) +
                  "\r\n\r\n" + smuggled};
  const auto out = h.serve(stream);
  ASSERT_EQ(out.size(), 1u) << stream.output;
  EXPECT_EQ(out[0].status, 403);
  EXPECT_EQ(out[0].message[bhttp::field::connection], "close");
  EXPECT_TRUE(stream.shut);
}

TEST(HttpConnection, ARefusedHeadWithoutABodyKeepsTheConnection) {
  Harness h;
  const auto out = h.serve({std::string("GET /hello HTTP/1.1\r\nHost: a\r\nX-Refuse: 1\r\n\r\n"
                                        "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n")});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, 403);
  EXPECT_EQ(out[1].body, "hi");
}

TEST(HttpConnection, ABodyOnAGetIsReadAsItsBody) {
  Harness h;
  const std::string inner = "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n";
  const auto out = h.serve({"GET /header HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(inner.size()) +
                            "\r\n\r\n" + inner});
  ASSERT_EQ(out.size(), 1u);  // the body is not a second request
  EXPECT_EQ(out[0].status, 200);
}

TEST(HttpConnection, ConflictingOrBrokenFramingIsRefusedAndCloses) {
  for (const std::string& request : std::vector<std::string>{
           "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
           "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
           "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
           "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
           "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
           "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
           "GARBAGE\r\n\r\n",
           "GET /hello HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
           "GET /hello HTTP/1.1\r\nHost: a\r\nX: a\x01" "b\r\n\r\n",
           "GET http://evil/hello HTTP/1.1\r\nHost: a\r\n\r\n",
           std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),
       }) {
    Harness h;
    MemoryStream stream;
    stream.input = {request + "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n"};
    const auto out = h.serve(stream);
    ASSERT_EQ(out.size(), 1u) << request << "\n->\n" << stream.output;
    EXPECT_EQ(out[0].status, 400) << request << "\n->\n" << stream.output;
    EXPECT_TRUE(stream.shut) << request;
  }
  Harness h;
  const auto out = h.serve({std::string("GET /hello HTTP/9.9\r\nHost: a\r\n\r\n")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].status == 400 || out[0].status == 505) << out[0].status;
}

TEST(HttpConnection, DuplicateEqualLengthsAreOneLength) {
  Harness h;
  const auto out =
      h.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].body, "ok");
}

TEST(HttpConnection, AChunkedRequestBodyIsReadWhole) {
  Harness h;
  const auto out = h.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n")});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].body, "abcde");
  EXPECT_EQ(out[1].body, "hi");
}

TEST(HttpConnection, AProducedBodyIsChunkedAndEndsProperly) {
  Harness h;
  MemoryStream stream;
  stream.input = {"GET /stream HTTP/1.1\r\nHost: a\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n"};
  const auto out = h.serve(stream);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].message[bhttp::field::transfer_encoding], "chunked");
  EXPECT_EQ(out[0].body, "data: 3\n\ndata: 2\n\ndata: 1\n\n");
  EXPECT_EQ(out[1].body, "hi");
  EXPECT_EQ(h.stream_finished, std::vector<bool>{true});
}

TEST(HttpConnection, Http10GetsItsProducedBodyUntilTheClose) {
  Harness h;
  MemoryStream stream;
  stream.input = {"GET /stream HTTP/1.0\r\nHost: a\r\n\r\n"};
  serve_connection(stream, h.hooks, h.options);
  EXPECT_EQ(stream.output.find("Transfer-Encoding"), std::string::npos);
  EXPECT_NE(stream.output.find("Connection: close\r\n\r\ndata: 3\n\ndata: 2\n\ndata: 1\n\n"), std::string::npos)
      << stream.output;
  EXPECT_TRUE(stream.shut);
}

TEST(HttpConnection, Http10KeepAliveIsHonoured) {
  Harness h;
  const auto out = h.serve({std::string("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                                        "GET /hello HTTP/1.0\r\n\r\nGET /hello HTTP/1.0\r\n\r\n")});
  ASSERT_EQ(out.size(), 2u);  // the second closes the connection: the third is never read
  EXPECT_EQ(out[0].message[bhttp::field::connection], "keep-alive");
  EXPECT_EQ(out[1].message[bhttp::field::connection], "close");
}

TEST(HttpConnection, AClientThatLeavesMidStreamEndsTheStream) {
  Harness h;
  MemoryStream stream;
  stream.input = {"GET /stream HTTP/1.1\r\nHost: a\r\n\r\n"};
  stream.takes_bytes = 100;  // the head and a chunk
  serve_connection(stream, h.hooks, h.options);
  EXPECT_EQ(h.stream_finished, std::vector<bool>{false});
}

TEST(HttpConnection, HeadGetsTheLengthButNoBody) {
  Harness h;
  MemoryStream stream;
  stream.input = {"HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n"};
  serve_connection(stream, h.hooks, h.options);
  EXPECT_EQ(stream.output.rfind("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nHTTP/1.1 200", 0),
            0u)
      << stream.output;
}

TEST(HttpConnection, ExpectContinueIsMetAndOtherExpectationsAreNot) {
  Harness h;
  auto out = h.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"),
                      std::string("ok")});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, 100);
  EXPECT_EQ(out[1].body, "ok");
  Harness h2;
  out = h2.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nExpect: magic\r\nContent-Length: 2\r\n\r\nok")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 417);
}

TEST(HttpConnection, HeaderValuesArePassedAsSent) {
  Harness h;
  const auto out = h.serve({std::string("GET /header HTTP/1.1\r\nHost: a\r\nX-Key: sekrit%2D123\r\n\r\n")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].body, "sekrit%2D123");
}

TEST(HttpConnection, AnIdleConnectionClosesWithoutAnAnswer) {
  Harness h;
  MemoryStream stream;
  stream.silent_at_end = true;
  const auto start = Clock::now();
  serve_connection(stream, h.hooks, h.options);
  EXPECT_EQ(stream.output, "");
  EXPECT_GE(Clock::now() - start, h.options.idle_timeout);
  EXPECT_EQ(h.closed, 1);
}

TEST(HttpConnection, TheHeadDeadlineCountsFromItsFirstByteNotPerRead) {
  Harness h;  // each pause is shorter than the head's deadline, all together they are not
  std::vector<MemoryStream::Step> steps{"GET /hello HTTP/1.1\r\nHost: a\r\n"};
  for (int i = 0; i < 20; ++i) {
    steps.emplace_back(50ms);
    steps.emplace_back("X-Slow: a\r\n");
  }
  const auto start = Clock::now();
  const auto out = h.serve(steps);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 408);
  EXPECT_LT(Clock::now() - start, 800ms);
}

TEST(HttpConnection, ABodyThatStopsComingIs408) {
  Harness h;
  MemoryStream stream;
  stream.input = {"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc"};
  stream.silent_at_end = true;
  const auto out = h.serve(stream);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 408);
}

TEST(HttpConnection, ABodyCutShortByItsClientIsNotAnswered) {
  Harness h;
  const auto out = h.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")});
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(h.closed, 1);
}

TEST(HttpConnection, OversizedHeadsAndBodiesAreRefused) {
  Harness h;
  auto out = h.serve({"GET /hello HTTP/1.1\r\nHost: a\r\nX-Long: " + std::string(100000, 'a') + "\r\n\r\n"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 431);
  std::string fields = "GET /hello HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 150; ++i) fields += "X-H" + std::to_string(i) + ": v\r\n";
  Harness h2;
  out = h2.serve({fields + "\r\n"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 431);
  Harness h3;
  h3.options.max_body = 4;
  out = h3.serve({std::string("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nabcde")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 413);
}

TEST(HttpConnection, AHandlerThatThrowsIs500AndTheConnectionGoesOn) {
  Harness h;
  h.router.get("/throw", [](const Request&, Response&) { throw std::runtime_error("boom"); });
  const auto out = h.serve({std::string("GET /throw HTTP/1.1\r\nHost: a\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n")});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, 500);
  EXPECT_NE(out[0].body.find("boom"), std::string::npos);
  EXPECT_EQ(out[1].body, "hi");
}

TEST(HttpConnection, HeaderValuesWeSendCannotSplitTheHead) {
  Harness h;
  h.router.get("/inject", [](const Request&, Response& res) {
    res.set_header("X-Evil", "a\r\nSet-Cookie: x=1");
    res.set_content("ok", "text/plain");
  });
  MemoryStream stream;
  stream.input = {"GET /inject HTTP/1.1\r\nHost: a\r\n\r\n"};
  serve_connection(stream, h.hooks, h.options);
  EXPECT_EQ(stream.output.find("Set-Cookie"), std::string::npos);
}

TEST(HttpConnection, AHeadSentInManyReadsIsBoundedAsAWhole) {
  Harness h;  // each read a whole header line, so the parser never sees more than one at once
  std::vector<MemoryStream::Step> steps{"GET /hello HTTP/1.1\r\nHost: a\r\n"};
  for (int i = 0; i < 80; ++i) steps.emplace_back("X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'a') + "\r\n");
  steps.emplace_back("\r\n");
  const auto out = h.serve(steps);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 431);
}

TEST(HttpConnection, ABodyMustComeAtAMinimumRate) {
  Harness h;  // no pause is long, but 100 bytes a second would take 10 s
  h.options.body_min_rate = 1000;
  std::vector<MemoryStream::Step> steps{"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n"};
  for (int i = 0; i < 100; ++i) {
    steps.emplace_back(100ms);
    steps.emplace_back(std::string(10, 'x'));
  }
  const auto start = Clock::now();
  const auto out = h.serve(steps);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 408);
  EXPECT_LT(Clock::now() - start, 3s);
}

TEST(HttpConnection, AnyConnectionCloseFieldCloses) {
  Harness h;
  const auto out = h.serve({std::string("GET /hello HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n"
                                        "Connection: close\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].message[bhttp::field::connection], "close");
}

TEST(HttpConnection, AProducerThatThrowsEndsItsBodyNotTheServer) {
  Harness h;
  h.router.get("/broken", [&h](const Request&, Response& res) {
    res.set_stream(
        "text/plain", [](Sink& sink) -> bool {
          sink.write("partial");
          throw std::runtime_error("broken producer");
        },
        [&h](bool whole) { h.stream_finished.push_back(whole); });
  });
  MemoryStream stream;
  stream.input = {"GET /broken HTTP/1.1\r\nHost: a\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n"};
  serve_connection(stream, h.hooks, h.options);
  EXPECT_EQ(h.stream_finished, std::vector<bool>{false});
  EXPECT_EQ(stream.output.find("hi"), std::string::npos);  // the connection ended with the broken body
}

TEST(HttpConnection, AChunkHeaderLongerThanAnyHeadIsRefused) {
  Harness h;
  const auto out = h.serve({"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=" +
                            std::string(70000, 'e')});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 400);
}

TEST(HttpRouter, MatchesLiteralPathsAndCapturesSegments) {
  Router router;
  router.get("/v1/models", [](const Request&, Response&) {});
  router.get("/v1/models/{}", [](const Request&, Response&) {});
  router.post("/v1/chat/completions", [](const Request&, Response&) {});
  router.del("/v1/responses/{}", [](const Request&, Response&) {});
  router.get("/v1/responses/{}", [](const Request&, Response&) {});
  EXPECT_EQ(router.find("GET", "/v1/models").outcome, Router::Outcome::Found);
  EXPECT_EQ(router.find("HEAD", "/v1/models").outcome, Router::Outcome::Found);
  auto found = router.find("GET", "/v1/models/Qwen%2FCoder%20x");
  EXPECT_EQ(found.outcome, Router::Outcome::NotFound);  // a decoded '/' never passes
  found = router.find("GET", "/v1/models/Qwen%20x");
  ASSERT_EQ(found.outcome, Router::Outcome::Found);
  EXPECT_EQ(found.params, std::vector<std::string>{"Qwen x"});
  for (const char* path : {"/v1/models/", "//v1/models", "/v1//models", "/V1/models", "/v1/./models", "/%761/models",
                           "/v1/models/a/b", "/v1/models/%zz", "/v1/models/a%00b", ""})
    EXPECT_EQ(router.find("GET", path).outcome, Router::Outcome::NotFound) << path;
  found = router.find("GET", "/v1/chat/completions");
  EXPECT_EQ(found.outcome, Router::Outcome::WrongMethod);
  EXPECT_EQ(found.allowed, "POST");
  found = router.find("POST", "/v1/responses/abc");
  EXPECT_EQ(found.outcome, Router::Outcome::WrongMethod);
  EXPECT_EQ(found.allowed, "DELETE, GET, HEAD");
}

TEST(HttpRouter, TheFallbackServesOnlyWhatItsPredicateAccepts) {
  Router router;
  router.get("/status", [](const Request&, Response&) {});
  router.fallback_get([](std::string_view path) { return !path.starts_with("/v1"); }, [](const Request&, Response&) {});
  EXPECT_EQ(router.find("GET", "/app.js").outcome, Router::Outcome::Found);
  EXPECT_EQ(router.find("GET", "/v1/nope").outcome, Router::Outcome::NotFound);
  EXPECT_EQ(router.find("POST", "/app.js").outcome, Router::Outcome::NotFound);
  EXPECT_EQ(router.find("POST", "/status").outcome, Router::Outcome::WrongMethod);
}

}  // namespace
}  // namespace splash::server::http
