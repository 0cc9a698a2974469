#include "server/reply_stream.h"

#include <algorithm>
#include <future>

#include "api/anthropic_messages.h"
#include "common/error.h"
#include "engine/output_constraints.h"
#include "server/event_channel.h"

namespace splash::server {
namespace {

constexpr auto kCommitAfter = std::chrono::seconds(1);
constexpr auto kProbeEvery = std::chrono::milliseconds(500);

// A submission running on a thread of its own (see serve_reply), waited for by its last owner.
struct Submission {
  std::future<void> done;
  explicit Submission(std::future<void> f) : done(std::move(f)) {}
  ~Submission() {
    if (done.valid()) done.wait();
  }
};

}  // namespace

bool is_anthropic_route(const std::string& path) { return path.starts_with("/v1/messages"); }

void send_api_error(const http::Request& req, http::Response& res, const api::ApiError& error) {
  res.status = error.status;
  const auto body = is_anthropic_route(req.path) ? api::anthropic_error_body(error) : api::openai_error_body(error);
  res.set_content(api::dump_json(body), "application/json");
}

void serve_reply(http::Response& res, engine::EngineService& engine, engine::ChatRequest request, bool stream,
                 std::shared_ptr<api::ReplyRenderer> renderer, const ErrorWriter& write_error,
                 std::shared_ptr<void> in_flight, std::chrono::seconds keep_alive) {
  // Grammars are compiled here, on the HTTP thread: a schema this engine cannot honour is the
  // caller's 400, and compiling never holds up the engine (results are cached by shape).
  try {
    request.tool_syntax = engine.tool_call_syntax();
    if (!request.constraints) request.constraints = engine::compile_output_constraints(request);
  } catch (const Error& e) {
    return write_error(res, api::ApiError::bad_request(e.what()));
  }
  // Replies nobody reads to the end: without max_tokens a non-streaming request stops at
  // kDefaultReplyTokens (finish reason "length"), not at the end of the context.
  if (!stream && request.max_tokens <= 0) request.max_tokens = kDefaultReplyTokens;
  auto channel = std::make_shared<EventChannel>();
  auto ticket = std::make_shared<engine::ChatTicket>();
  auto sink = [channel](const engine::ChatEvent& e) { return channel->push(e); };
  // A request with images is submitted from a thread of its own, since submitting encodes
  // them (seconds): meanwhile this one commits the reply and probes the client as below,
  // and a client that leaves cancels the encoding. Whoever lets go of the reply last waits
  // for that thread (the engine outlives every connection, not a detached thread).
  std::shared_ptr<Submission> submission;
  const bool has_images = std::any_of(request.messages.begin(), request.messages.end(),
                                      [](const chat::ChatMessage& m) { return !m.images.empty(); });
  if (has_images)
    submission = std::make_shared<Submission>(std::async(
        std::launch::async, [&engine, ticket, request = std::move(request), sink]() mutable {
          engine.submit(ticket, std::move(request), sink);
        }));
  else
    engine.submit(ticket, std::move(request), sink);

  // The first event decides the status when it comes within kCommitAfter: Started (200, then
  // the reply) or Failed (400/503). A request still queued then is committed to 200 and its
  // connection probed while it waits (below), so a client that leaves the queue cancels it.
  using Clock = std::chrono::steady_clock;
  const auto commit_at = Clock::now() + kCommitAfter;
  std::optional<engine::ChatEvent> first;
  while (!first && Clock::now() < commit_at)
    first = channel->pop(std::chrono::duration_cast<std::chrono::milliseconds>(commit_at - Clock::now()));
  if (first && first->kind == engine::ChatEvent::Kind::Failed) {
    channel->abandon();
    const bool shutting_down = !engine.accepting();
    return write_error(res, {shutting_down ? 503 : 400, first->error,
                             shutting_down ? "server_error" : "invalid_request_error", {}, {}});
  }
  if (!stream) {
    // A reply ready within kCommitAfter is answered as usual (its status still free). One
    // still queued or generating is committed to 200 and sent chunked: a space every
    // kProbeEvery (JSON allows leading whitespace) finds a client that left, whose request is
    // then cancelled instead of running on for nobody; a later failure is the protocol's
    // error body.
    if (first) renderer->collect(*first);
    while (first && Clock::now() < commit_at) {
      auto event = channel->pop(std::chrono::duration_cast<std::chrono::milliseconds>(commit_at - Clock::now()));
      if (!event) continue;
      if (event->kind == engine::ChatEvent::Kind::Failed) {
        channel->abandon();
        return write_error(res, {500, event->error, "server_error", {}, {}});
      }
      renderer->collect(*event);
      if (event->kind == engine::ChatEvent::Kind::Finished) {
        res.set_content(api::dump_json(renderer->final_body()), "application/json");
        return;
      }
    }
    auto last_probe = std::make_shared<Clock::time_point>(Clock::now());
    res.set_stream(
        "application/json",
        [channel, ticket, renderer, write_error, last_probe](http::Sink& sink) {
          if (Clock::now() - *last_probe >= kProbeEvery) {  // whether or not tokens are flowing
            if (!sink.write(" ")) return ticket->cancel(), false;
            *last_probe = Clock::now();
          }
          auto event = channel->pop(kProbeEvery);
          if (!event) return true;
          std::string body;
          if (event->kind == engine::ChatEvent::Kind::Failed) {
            http::Response error;
            write_error(error, {500, event->error, "server_error", {}, {}});
            body = error.body;
          } else {
            renderer->collect(*event);
            if (event->kind != engine::ChatEvent::Kind::Finished) return true;
            body = api::dump_json(renderer->final_body());
          }
          if (!sink.write(body)) return ticket->cancel(), false;
          sink.done();
          return true;
        },
        [channel, ticket, in_flight, submission](bool success) {
          if (!success) ticket->cancel();
          channel->abandon();
        });
    return;
  }
  // Silence (queued, or a long prompt being read): an SSE comment every kProbeEvery, which
  // clients skip, finds a client that left; the protocol's own keep-alive event still goes
  // out after `keep_alive` without an event, for clients that watch events, not bytes.
  auto pending = std::make_shared<std::string>(first ? renderer->stream_event(*first) : std::string());
  auto started = std::make_shared<bool>(first.has_value());
  auto last_write = std::make_shared<Clock::time_point>(Clock::now());
  auto last_event = std::make_shared<Clock::time_point>(Clock::now());
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_stream(
      "text/event-stream",
      [channel, ticket, renderer, pending, started, last_write, last_event, keep_alive](http::Sink& sink) {
        // Each call writes what is ready; a failed write means the client left.
        if (!pending->empty()) {
          if (!sink.write(*pending)) return ticket->cancel(), false;
          pending->clear();
          *last_write = Clock::now();
        }
        auto event = channel->pop(std::chrono::milliseconds(200));
        if (!event) {  // nothing yet (queued, or a long prompt is being read); called again
          const auto now = Clock::now();
          if (now - *last_event >= keep_alive) {
            if (!sink.write(renderer->keep_alive())) return ticket->cancel(), false;
            *last_write = *last_event = now;
          } else if (now - *last_write >= kProbeEvery) {
            if (!sink.write(*started ? ": working\n\n" : ": queued\n\n")) return ticket->cancel(), false;
            *last_write = now;
          }
          return true;
        }
        *last_write = *last_event = Clock::now();
        *started = true;
        std::string out = renderer->stream_event(*event);
        const bool last =
            event->kind == engine::ChatEvent::Kind::Finished || event->kind == engine::ChatEvent::Kind::Failed;
        if (last) out += renderer->stream_end();
        if (!out.empty() && !sink.write(out)) return ticket->cancel(), false;
        if (last) sink.done();
        return true;
      },
      [channel, ticket, in_flight, submission](bool success) {
        if (!success) ticket->cancel();
        channel->abandon();
      });
}

}  // namespace splash::server
