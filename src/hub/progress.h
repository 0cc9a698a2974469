#pragma once
// Progress of a long hub step (download, extraction), reported to whoever shows it.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace splash::hub {

struct Progress {
  std::string_view stage;  // "downloading", "extracting", "waiting for another download"
  std::uint64_t done_bytes = 0;
  std::uint64_t total_bytes = 0;  // 0 when unknown
  double bytes_per_second = 0.0;  // average since the stage started
  bool finished = false;          // last report of this stage
};

// Called from the thread doing the work, a few times a second at most, and once with
// finished=true when a stage completes. May throw to cancel the work.
using ProgressFn = std::function<void(const Progress&)>;

// Renders progress on stderr: one line rewritten in place when stderr is a terminal,
// otherwise a plain line every ~10% so logs stay short.
ProgressFn terminal_progress(std::string label);

}  // namespace splash::hub
