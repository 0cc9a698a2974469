#pragma once
// Request bodies being read and parsed at once, bounded in bytes. httplib reads a body whole
// into memory before its handler runs, so 256 connections each sending the 8 MiB maximum
// would hold 2 GiB outside the memory plan, and their parsed JSON trees several times more.
// A body is counted from its headers (its Content-Length, before a byte of it is read), and
// its parsed tree (json_node_count) before it is parsed, until its handler is done with it;
// one that does not fit is refused at once with 503 and Retry-After (never queued: a queue of
// unread bodies is what this bounds).
#include <atomic>
#include <cstddef>
#include <cstdint>

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

}  // namespace splash::server
