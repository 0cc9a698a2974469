#include "hub/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

namespace splash::hub {

namespace {

std::string describe(const std::string& label, const Progress& progress) {
  constexpr double kMegabyte = 1e6;
  std::string line = fmt::format("{}: {}", label, progress.stage);
  if (progress.total_bytes > 0) {
    const double percent = 100.0 * static_cast<double>(progress.done_bytes) /
                           static_cast<double>(progress.total_bytes);
    line += fmt::format(" {:3.0f}% {:.1f}/{:.1f} MB", percent,
                        static_cast<double>(progress.done_bytes) / kMegabyte,
                        static_cast<double>(progress.total_bytes) / kMegabyte);
  } else if (progress.done_bytes > 0) {
    line += fmt::format(" {:.1f} MB", static_cast<double>(progress.done_bytes) / kMegabyte);
  }
  if (progress.bytes_per_second > 0) {
    line += fmt::format(" {:.1f} MB/s", progress.bytes_per_second / kMegabyte);
  }
  return line;
}

struct RendererState {
  std::string label;
  bool is_terminal = false;
  std::string stage;           // stage of the line currently shown
  bool line_open = false;      // a terminal line without its newline yet
  int last_logged_tenth = -1;  // for plain logs: last 10% step printed
};

void render_on_terminal(RendererState& state, const Progress& progress) {
  // \r + erase-to-end rewrites the line in place; a new stage starts on a fresh line.
  if (state.line_open && state.stage != progress.stage) std::fputs("\n", stderr);
  state.stage = progress.stage;
  std::fputs(("\r\033[K" + describe(state.label, progress)).c_str(), stderr);
  state.line_open = !progress.finished;
  if (progress.finished) std::fputs("\n", stderr);
  std::fflush(stderr);
}

void render_as_log(RendererState& state, const Progress& progress) {
  if (state.stage != progress.stage) {
    state.stage = progress.stage;
    state.last_logged_tenth = -1;
  }
  int tenth = 0;
  if (progress.total_bytes > 0) {
    tenth = static_cast<int>(10 * progress.done_bytes / progress.total_bytes);
  } else {
    tenth = static_cast<int>(progress.done_bytes / 50'000'000);  // every 50 MB when size unknown
  }
  if (!progress.finished) {
    // 100% is left to the finished report, so a completed stage prints one line, not two.
    const bool complete = progress.total_bytes > 0 && progress.done_bytes >= progress.total_bytes;
    if (tenth == state.last_logged_tenth || complete) return;
  }
  state.last_logged_tenth = tenth;
  const bool moved_bytes = progress.done_bytes > 0;
  std::fputs(
      (describe(state.label, progress) + (progress.finished && moved_bytes ? " done\n" : "\n"))
          .c_str(),
      stderr);
}

}  // namespace

ProgressFn terminal_progress(std::string label) {
  // Shared so that copies of the returned std::function render one and the same line.
  auto state = std::make_shared<RendererState>();
  state->label = std::move(label);
  state->is_terminal = ::isatty(STDERR_FILENO) == 1;
  return [state](const Progress& progress) {
    if (state->is_terminal) {
      render_on_terminal(*state, progress);
    } else {
      render_as_log(*state, progress);
    }
  };
}

}  // namespace splash::hub
