#pragma once
// One error type for failures that must reach the user as a clear, one-line message
// (bad file, bad flag, failed download). Thrown inside a layer, caught at the edge
// (main, later the HTTP handlers) and rendered there; never crosses a thread unhandled.
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace splash {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace splash
