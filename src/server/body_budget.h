#pragma once
// Request bodies being read and parsed at once, bounded in bytes. A body is read whole
// into memory before its handler runs, so 256 connections each sending the 8 MiB maximum
// would hold 2 GiB outside the memory plan, and their parsed JSON several times more. A body
// is counted from its headers (its Content-Length, before a byte of it is read), and its
// parsed form (its text again plus json_node_count x kParsedBytesPerJsonNode) before it is
// parsed, until its route has turned it into the internal request; one that does not fit is
// refused at once with 503 and Retry-After (never queued: a queue of unread bodies is what
// this bounds).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "server/http/message.h"

namespace splash::server {

class BodyBudget {
 public:
  explicit BodyBudget(size_t bytes) : capacity_(bytes) {}

  // Counts `bytes` in when they fit beside the bodies already counted; false (and a refusal
  // counted) when not.
  bool try_acquire(size_t bytes);
  void release(size_t bytes);

  size_t capacity() const { return capacity_; }
  size_t in_use() const { return used_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  const size_t capacity_;
  std::atomic<size_t> used_{0};
  std::atomic<uint64_t> refused_{0};
};

// The reservation of the request this HTTP thread serves (a connection is served on one
// thread from its headers to its response).

// Before the body is read: `bytes` (its Content-Length) from `budget`; false when they do not fit.
bool hold_request_body(const std::shared_ptr<BodyBudget>& budget, size_t bytes);

enum class ParseRoom { Held, Busy, NeverFits };
// Before the body is parsed: room for its parsed form beside its text.
ParseRoom hold_room_to_parse(const http::Request& req);

// The route is done with the body (parsed into its request, or refused): the text is freed
// (a streamed reply keeps its Request alive for minutes), the reservation given back,
// and after a large body the freed pages handed back to the OS. Safe to call more than once.
void done_with_request_body(const http::Request& req);

// The reservation given back without the request (when no route ran: an unknown route, a
// body cut short, or an earlier request's left on this thread).
void release_request_body();

}  // namespace splash::server
