#include "engine/tool_call_stream.h"

#include <fmt/format.h>

#include <random>

#include "chat/tool_prompt.h"

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
        size_t safe = args.size() - partial_marker_tail(args, terminator);
        safe -= incomplete_utf8_tail(std::string_view(args).substr(0, safe));
        if (safe > emitted_) {
          ToolCallUpdate delta;
          delta.kind = ToolCallUpdate::Kind::Arguments;
          delta.index = static_cast<int>(calls_.size());
          delta.arguments = args.substr(emitted_, safe - emitted_);
          out.push_back(std::move(delta));
          emitted_ = safe;
        }
        return;
      }
    }
  }
}

void ToolCallStream::finish() {
  // A call cut short (max_tokens) is dropped: its arguments are not the complete, valid JSON
  // every reported call carries. (A stream has already shown its start and partial deltas;
  // the finish reason, length, says why it never finished.)
  current_ = {};
  buffer_.clear();
  state_ = State::BetweenCalls;
}

}  // namespace splash::engine
