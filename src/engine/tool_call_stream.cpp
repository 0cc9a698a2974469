#include "engine/tool_call_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "chat/tool_prompt.h"
#include "common/json_depth.h"

namespace splash::engine {

namespace {

// Names longer than this cannot be a tool of ours: the head is malformed.
constexpr size_t kMaxHead = 256;

// How many bytes at the end of `text` start a UTF-8 character that is not complete yet.
size_t incomplete_utf8_tail(std::string_view text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

// The longest tail of `text` that is a proper prefix of `marker`.
size_t partial_marker_tail(std::string_view text, std::string_view marker) {
  for (size_t length = std::min(text.size(), marker.size() - 1); length > 0; --length)
    if (text.substr(text.size() - length) == marker.substr(0, length)) return length;
  return 0;
}

// Text as the inside of a JSON string (complete UTF-8 characters).
std::string json_string_body(std::string_view text) {
  const std::string quoted = nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

std::string_view trimmed(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

}  // namespace

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

void ToolCallStream::push(std::string_view bytes, std::vector<ToolCallUpdate>& out) {
  buffer_.append(bytes);
  step(out);
}

void ToolCallStream::start_call(std::string name, bool custom, std::vector<ToolCallUpdate>& out) {
  current_ = chat::ToolCall{new_tool_call_id(), std::move(name), {}, custom};
  emitted_ = 0;
  ToolCallUpdate update;
  update.kind = ToolCallUpdate::Kind::Started;
  update.index = static_cast<int>(calls_.size());
  update.call = current_;
  out.push_back(std::move(update));
  state_ = State::Arguments;
}

void ToolCallStream::end_call(std::vector<ToolCallUpdate>& out) {
  if (emitted_ < current_.arguments.size()) {
    ToolCallUpdate delta;
    delta.kind = ToolCallUpdate::Kind::Arguments;
    delta.index = static_cast<int>(calls_.size());
    delta.arguments = current_.arguments.substr(emitted_);
    out.push_back(std::move(delta));
  }
  ToolCallUpdate done;
  done.kind = ToolCallUpdate::Kind::Finished;
  done.index = static_cast<int>(calls_.size());
  done.call = current_;
  out.push_back(std::move(done));
  calls_.push_back(std::move(current_));
  current_ = {};
  emitted_ = 0;
  state_ = State::BetweenCalls;
}

void ToolCallStream::stream_arguments(size_t safe, std::vector<ToolCallUpdate>& out) {
  const std::string& args = current_.arguments;
  safe -= incomplete_utf8_tail(std::string_view(args).substr(0, safe));
  if (safe <= emitted_) return;
  ToolCallUpdate delta;
  delta.kind = ToolCallUpdate::Kind::Arguments;
  delta.index = static_cast<int>(calls_.size());
  delta.arguments = args.substr(emitted_, safe - emitted_);
  out.push_back(std::move(delta));
  emitted_ = safe;
}

void ToolCallStream::step(std::vector<ToolCallUpdate>& out) {
  constexpr std::string_view kNextCall = "\n<tool_call>";
  while (true) {
    switch (state_) {
      case State::BetweenCalls: {
        if (buffer_.size() >= kNextCall.size() && buffer_.starts_with(kNextCall)) {
          buffer_.erase(0, kNextCall.size());
          state_ = State::BodyStart;
          continue;
        }
        if (!kNextCall.starts_with(buffer_)) buffer_.clear();  // not a call: nothing to parse
        return;
      }
      case State::BodyStart: {
        if (buffer_.empty()) return;
        if (buffer_.starts_with(chat::kToolCallBodyStart)) buffer_.erase(0, chat::kToolCallBodyStart.size());
        state_ = State::Head;
        continue;
      }
      case State::Head: {
        if (buffer_.empty()) return;
        if (syntax_ == chat::ToolCallSyntax::Xml && buffer_[0] == '<') {
          if (!step_xml(out)) return;
          continue;
        }
        if (buffer_[0] == '{') {
          const std::string_view name_prefix = chat::kFunctionCallNamePrefix;
          const std::string_view args_prefix = chat::kFunctionCallArgumentsPrefix;
          if (buffer_.size() < name_prefix.size()) {
            if (name_prefix.starts_with(buffer_)) return;
          } else if (buffer_.starts_with(name_prefix)) {
            const size_t quote = buffer_.find('"', name_prefix.size());
            if (quote == std::string::npos) {
              if (buffer_.size() < kMaxHead) return;
            } else {
              const std::string_view after = std::string_view(buffer_).substr(quote);
              if (after.size() < args_prefix.size() && args_prefix.starts_with(after)) return;
              if (after.starts_with(args_prefix)) {
                std::string name = buffer_.substr(name_prefix.size(), quote - name_prefix.size());
                buffer_.erase(0, quote + args_prefix.size());
                start_call(std::move(name), false, out);
                continue;
              }
            }
          }
          // Not the layout we asked for: the whole text becomes the arguments of a nameless call.
          start_call({}, false, out);
          continue;
        }
        const size_t newline = buffer_.find('\n');
        if (newline == std::string::npos) {
          if (buffer_.size() < kMaxHead) return;
          start_call({}, true, out);
          continue;
        }
        std::string name = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        start_call(std::move(name), true, out);
        continue;
      }
      case State::Arguments: {
        const std::string terminator =
            current_.custom ? std::string(chat::kToolCallEnd)
                            : std::string(chat::kFunctionCallSuffix) + std::string(chat::kToolCallEnd);
        std::string& args = current_.arguments;
        const size_t search_from = emitted_ > terminator.size() ? emitted_ - terminator.size() : 0;
        args += buffer_;
        buffer_.clear();
        const size_t end = args.find(terminator, search_from);
        if (end != std::string::npos) {
          buffer_ = args.substr(end + terminator.size());
          args.resize(end);
          end_call(out);
          continue;
        }
        stream_arguments(args.size() - partial_marker_tail(args, terminator), out);
        return;
      }
      case State::XmlParameters:
      case State::XmlValue: {
        if (!step_xml(out)) return;
        continue;
      }
      case State::BareName: {
        const size_t quote = buffer_.find('"');
        if (quote == std::string::npos) {
          if (buffer_.size() < kMaxHead) return;
          state_ = State::BetweenCalls;  // not a name: nothing to report
          continue;
        }
        std::string name = buffer_.substr(0, quote);
        buffer_.erase(0, quote + 1);
        start_call(std::move(name), false, out);
        state_ = State::BareSeekArguments;
        continue;
      }
      case State::BareSeekArguments: {
        // `, "arguments": ` with any whitespace (the grammar allows some).
        const size_t key = buffer_.find("\"arguments\"");
        if (key == std::string::npos) return;
        const size_t colon = buffer_.find(':', key);
        if (colon == std::string::npos) return;
        size_t value = colon + 1;
        while (value < buffer_.size() && std::isspace(static_cast<unsigned char>(buffer_[value]))) ++value;
        if (value == buffer_.size()) return;
        buffer_.erase(0, value);
        state_ = State::BareArguments;
        continue;
      }
      case State::BareArguments: {
        std::string& args = current_.arguments;
        args += buffer_;
        buffer_.clear();
        // Whitespace, braces and backticks at the end may be the call's closing, not arguments.
        size_t safe = args.size();
        while (safe > emitted_ && std::string_view(" \t\r\n}`").find(args[safe - 1]) != std::string_view::npos) --safe;
        stream_arguments(safe, out);
        return;
      }
    }
  }
}

bool ToolCallStream::step_xml(std::vector<ToolCallUpdate>& out) {
  const std::string_view buffer = buffer_;
  // A head, "<function=NAME>\n" or "<parameter=NAME>\n": its name, or nullopt while it may
  // still be one; malformed (not this head, or a name too long to be one): set.
  bool malformed = false;
  auto head = [&](std::string_view open) -> std::optional<std::string> {
    if (!buffer.starts_with(open)) {
      malformed = !open.starts_with(buffer);
      return std::nullopt;
    }
    const size_t close = buffer.find(">\n", open.size());
    if (close == std::string_view::npos) {
      malformed = buffer.size() >= open.size() + kMaxHead;
      return std::nullopt;
    }
    std::string name(buffer.substr(open.size(), close - open.size()));
    buffer_.erase(0, close + 2);
    return name;
  };
  auto close_arguments = [&] {
    if (!current_.custom) current_.arguments += parameters_ == 0 ? "{}" : "}";
  };
  switch (state_) {
    case State::Head: {
      std::optional<std::string> name = head(chat::kXmlFunctionOpen);
      if (!name) {
        if (!malformed) return false;
        start_call({}, true, out);  // not the layout asked for: the text is a nameless call's input
        return true;
      }
      tool_ = nullptr;
      for (const chat::ToolSpec& tool : tools_)
        if (tool.name == *name) tool_ = &tool;
      start_call(std::move(*name), tool_ && tool_->kind == chat::ToolSpec::Kind::Custom, out);
      parameters_ = 0;
      state_ = State::XmlParameters;
      return true;
    }
    case State::XmlParameters: {
      const std::string end = std::string(chat::kXmlFunctionClose) + std::string(chat::kToolCallEnd);
      if (buffer.starts_with(end)) {
        buffer_.erase(0, end.size());
        close_arguments();
        end_call(out);
        return true;
      }
      std::optional<std::string> name = head(chat::kXmlParameterOpen);
      if (!name) {
        if (!malformed || std::string_view(end).starts_with(buffer)) return false;
        close_arguments();  // not a parameter nor the end: the call ends with what arrived
        end_call(out);
        return true;
      }
      value_kind_ = current_.custom ? chat::XmlValueKind::Text
                    : tool_         ? chat::xml_value_kind(*tool_, *name)
                                    : chat::XmlValueKind::Either;
      if (!current_.custom) {
        current_.arguments += parameters_ == 0 ? "{" : ", ";
        current_.arguments += nlohmann::json(*name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        current_.arguments += value_kind_ == chat::XmlValueKind::Text ? ": \"" : ": ";
      }
      ++parameters_;
      value_.clear();
      state_ = State::XmlValue;
      return true;
    }
    case State::XmlValue: {
      constexpr std::string_view kClose = chat::kXmlParameterClose;
      const size_t search_from = value_.size() >= kClose.size() ? value_.size() - kClose.size() + 1 : 0;
      value_ += buffer_;
      buffer_.clear();
      if (const size_t end = value_.find(kClose, search_from); end != std::string::npos) {
        buffer_ = value_.substr(end + kClose.size());
        value_.resize(end);
        end_xml_value();
        stream_arguments(current_.arguments.size(), out);
        state_ = State::XmlParameters;
        return true;
      }
      if (value_kind_ == chat::XmlValueKind::Text) {  // streamed as it comes, less what may be the close
        size_t safe = value_.size() - partial_marker_tail(value_, kClose);
        safe -= incomplete_utf8_tail(std::string_view(value_).substr(0, safe));
        if (current_.custom) current_.arguments.append(value_, 0, safe);
        else current_.arguments += json_string_body(std::string_view(value_).substr(0, safe));
        value_.erase(0, safe);
        stream_arguments(current_.arguments.size(), out);
      }
      return false;
    }
    default: return false;
  }
}

void ToolCallStream::end_xml_value() {
  if (current_.custom) {
    current_.arguments += value_;
  } else if (value_kind_ == chat::XmlValueKind::Text) {
    current_.arguments += json_string_body(value_);
    current_.arguments += '"';
  } else {
    // A JSON value as written; text that is not JSON (no grammar held the model to it) as a string.
    const std::string_view text = trimmed(value_);
    const bool is_json = !text.empty() && json_nesting_depth(text) <= kMaxJsonDepth &&
                         nlohmann::json::accept(text.begin(), text.end());
    if (is_json) {
      current_.arguments.append(text);
    } else {
      current_.arguments += '"';
      current_.arguments += json_string_body(value_);
      current_.arguments += '"';
    }
  }
  value_.clear();
}

void ToolCallStream::begin_bare_call() {
  state_ = State::BareName;
  buffer_.clear();
}

void ToolCallStream::finish(bool bare_call_complete, std::vector<ToolCallUpdate>& out) {
  if (state_ == State::BareArguments && bare_call_complete) {
    // The grammar ended the object: what follows the arguments is whitespace, the call's own
    // closing brace and perhaps a code fence.
    std::string& args = current_.arguments;
    args += buffer_;
    size_t end = args.size();
    auto trim_space = [&] {
      while (end > 0 && std::isspace(static_cast<unsigned char>(args[end - 1]))) --end;
    };
    trim_space();
    if (end >= 3 && args.compare(end - 3, 3, "```") == 0) end -= 3;
    trim_space();
    if (end > 0 && args[end - 1] == '}') --end;
    trim_space();
    args.resize(std::max(end, emitted_));
    end_call(out);
  }
  // A call cut short (max_tokens) is dropped: its arguments are not the complete, valid JSON
  // every reported call carries. (A stream has already shown its start and partial deltas;
  // the finish reason, length, says why it never finished.)
  current_ = {};
  buffer_.clear();
  state_ = State::BetweenCalls;
}

}  // namespace splash::engine
