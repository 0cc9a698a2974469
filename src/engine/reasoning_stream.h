#pragma once
// The reasoning part of a thinking model's reply (ChatFormat::thinks()): a "<think>" ...
// "</think>" block at the reply's start, written by the model. Its text streams as reasoning,
// apart from the reply's text, and no output constraint applies inside it; once it closes,
// the tokens that follow are the reply proper. A reply that does not open with "<think>" is
// all reply, unless the prompt opened the block (ReasoningControl::opened). With a budget, the block is closed for the model (the close tokens are forced)
// after that many thinking tokens.
//
// As the template writes reasoning back (stripped of the newlines around it), the streamed
// reasoning leaves out the newlines after "<think>" and before "</think>".
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/stop_matcher.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {

struct ReasoningControl {
  bool enabled = false;               // the reply may open with a think block
  int budget = -1;                    // thinking tokens before the block is closed for the model (-1: no limit)
  std::vector<int32_t> close_tokens;  // what closes it: "\n</think>\n\n" as tokens
  bool opened = false;                // the prompt opened it (Qwen3.5's "<think>\n"): the reply starts inside it
};

class ReasoningStream {
 public:
  enum class Phase { Opening, Thinking, Reply };
  ReasoningStream(const tokenizer::Tokenizer& tokenizer, ReasoningControl control);

  Phase phase() const { return phase_; }
  // The token the model must take next instead of sampling one, if any (the tokens that
  // close the block when its budget has run out, the reply's first newlines among them);
  // taking it is the caller's (push() it while not in the reply, else the reply's).
  std::optional<int32_t> take_forced();

  // What one token of the Opening or Thinking phase gave: reasoning text safe to show, and
  // the tokens that turned out to be the reply's (held while the reply might still open
  // with "<think>"), in order.
  struct Fed {
    std::string reasoning;
    std::vector<int32_t> reply_tokens;
  };
  Fed push(int32_t token);
  // At the end of generation inside the block: the reasoning text still held back.
  std::string flush();
  // At the end of generation while still opening: the held tokens, which are the reply's.
  std::vector<int32_t> take_opening();
  int thinking_tokens() const { return thinking_tokens_; }

 private:
  std::string think(std::string_view text);  // text inside the block -> what may be shown

  const tokenizer::Tokenizer& tokenizer_;
  ReasoningControl control_;
  Phase phase_;
  std::vector<int32_t> opening_tokens_;  // held while the reply may still open with "<think>"
  std::string opening_text_;
  tokenizer::StreamingDetokenizer detokenizer_;
  StopMatcher close_;               // finds "</think>"
  bool started_ = false;            // reasoning text other than newlines has been shown
  std::string trailing_newlines_;   // held: they may be the last before "</think>"
  std::deque<int32_t> forcing_;     // close tokens still to take
  bool closing_ = false;            // the budget ran out: the close tokens were queued
  int thinking_tokens_ = 0;
};

}  // namespace splash::engine
