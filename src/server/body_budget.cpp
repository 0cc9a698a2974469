#include "server/body_budget.h"

#include <malloc.h>

#include <string>

#include "common/json_depth.h"

namespace splash::server {

bool BodyBudget::try_acquire(size_t bytes) {
  size_t used = used_.load();
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) {
      refused_.fetch_add(1);
      return false;
    }
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}

void BodyBudget::release(size_t bytes) { used_.fetch_sub(bytes); }

namespace {

struct HeldBody {
  std::shared_ptr<BodyBudget> budget;
  size_t bytes = 0;
};
thread_local HeldBody held;

// A body this large is followed by a malloc_trim once it is done with (a few ms, every arena
// locked meanwhile; agents' bodies are mostly smaller). Once glibc's mmap threshold has grown
// past such bodies, they and their parsed trees come from the thread arenas and stay with the
// process after they are freed (30 bodies of 7 MB, six at a time: +290 MiB of RSS, growing).
constexpr size_t kTrimAfterBodyBytes = size_t{1} << 20;

}  // namespace

bool hold_request_body(const std::shared_ptr<BodyBudget>& budget, size_t bytes) {
  release_request_body();
  if (bytes == 0) return true;
  if (!budget->try_acquire(bytes)) return false;
  held = {budget, bytes};
  return true;
}

ParseRoom hold_room_to_parse(const http::Request& req) {
  if (!held.budget || req.body.empty()) return ParseRoom::Held;
  const JsonShape shape = json_shape(req.body);
  // One nested too deeply is never parsed: its route refuses it as such.
  if (shape.depth > kMaxJsonDepth) return ParseRoom::Held;
  const size_t parsed = req.body.size() + shape.nodes * kParsedBytesPerJsonNode;
  if (parsed > held.budget->capacity() - held.bytes) return ParseRoom::NeverFits;
  if (!held.budget->try_acquire(parsed)) return ParseRoom::Busy;
  held.bytes += parsed;
  return ParseRoom::Held;
}

void done_with_request_body(const http::Request& req) {
  const size_t bytes = req.body.size();
  // The Request is its connection's non-const local, and nothing reads the body after the route.
  std::string().swap(const_cast<http::Request&>(req).body);
  release_request_body();
  if (bytes >= kTrimAfterBodyBytes) malloc_trim(0);
}

void release_request_body() {
  if (held.budget) held.budget->release(held.bytes);
  held = {};
}

}  // namespace splash::server
