#pragma once
// What every protocol's response writer does with the internal event stream (ChatEvent):
// stream it as Server-Sent Events, or collect it into one JSON body; and how the protocol
// spells an error. The HTTP layer drives any protocol through this one interface.
#include <string>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "engine/chat_request.h"

namespace splash::api {

class ReplyRenderer {
 public:
  virtual ~ReplyRenderer() = default;
  // SSE text for one event (possibly several SSE events, possibly none).
  virtual std::string stream_event(const engine::ChatEvent& event) = 0;
  // SSE text after the last event (e.g. "data: [DONE]").
  virtual std::string stream_end() { return {}; }
  // Written when nothing else was for a while (a long prompt is being read): clients that
  // time out idle streams (Claude Code after 300 s) keep waiting. An SSE comment by default,
  // which every SSE parser skips.
  virtual std::string keep_alive() { return ": keep-alive\n\n"; }
  // An error after the stream has started, in the protocol's streaming shape.
  virtual std::string stream_error(const ApiError& error) = 0;
  // Non-streaming: every event is collected, then the body is taken.
  virtual void collect(const engine::ChatEvent& event) = 0;
  virtual nlohmann::json final_body() = 0;
};

}  // namespace splash::api
