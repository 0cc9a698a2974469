#pragma once
// Stop strings over a stream of text: text that might be the start of a stop string is held
// back until it is known not to be one, so a stop string split across tokens is caught and
// never shown.
#include <string>
#include <string_view>
#include <vector>

namespace splash::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds newly decoded text and returns what may be shown now. Once a stop string appears,
  // stopped() is true and the text returned ends just before it.
  std::string push(std::string_view text);
  // At the end of generation: the held-back remainder (empty after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace splash::engine
