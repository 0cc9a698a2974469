#pragma once
// Constrained decoding for tool calls and structured output.
//
// compile_output_constraints() turns a request's tools, tool_choice and output format into
// grammars (grammar/), once per distinct request shape (a bounded cache: agents resend the
// same tools every turn). A ReplyShaper then drives one generation with them:
//   - free text (tool_choice auto) is unconstrained until the model writes "<tool_call>";
//     from there the call is constrained: a known tool's name, then JSON arguments valid
//     against that tool's schema (or a custom tool's raw input in its Lark grammar), then
//     "</tool_call>". After a call, only another call or the end may follow.
//   - tool_choice required / a named tool: the reply is calls from its first byte.
//   - tool_choice none: "<tool_call>" can never be completed.
//   - a JSON object / JSON Schema / Lark output format: the whole text follows the grammar
//     and the reply ends when it is complete.
// Sampling stays optimistic: a token is drawn from the unconstrained distribution and only
// checked; the full vocabulary mask is computed only when that token is refused. For greedy
// decoding this gives exactly the masked argmax.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_request.h"
#include "engine/tool_call_stream.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {

struct OutputConstraints {
  ToolChoice tool_choice = ToolChoice::Auto;
  chat::ToolCallSyntax syntax = chat::ToolCallSyntax::Json;
  // The XML syntax: the tools, for which of a call's parameters are text (ToolCallStream).
  std::vector<chat::ToolSpec> tools;
  bool parallel_tool_calls = true;
  bool has_tools = false;
  // After "<tool_call>": "\n" + one call of any allowed tool + "\n</tool_call>" (the call in
  // the request's syntax: JSON, or XML with the parameters in the schema's order, required
  // ones present, string values as raw text and others as JSON).
  std::shared_ptr<const grammar::Grammar> call_body;
  // "<tool_call>" + call_body: the first call when calls are required.
  std::shared_ptr<const grammar::Grammar> first_call;
  // "\n<tool_call>" + call_body: each further call (null: only one call is allowed).
  std::shared_ptr<const grammar::Grammar> next_call;
  // The reply's text when an output format is set; null: free text.
  std::shared_ptr<const grammar::Grammar> text;
  // tool_choice auto: a reply that opens as a bare JSON call, `{"name": "` (perhaps inside a
  // ```json fence), as small models often write instead of <tool_call>: after that opening,
  // a known function's name, `", "arguments": ` and its arguments, `}`, an optional fence.
  std::shared_ptr<const grammar::Grammar> bare_call;

  size_t memory_bytes() const;  // what these grammars hold
};

// Where a reply's first bytes stand against the bare JSON call opening
// (ws* ("```" lang? ws*)? "{" "{"? ws* "\"name\"" ws* ":" ws* "\""): not it, maybe (so far a
// prefix of it), or it, ending at `end`.
struct BareCallOpening {
  enum class Match { No, Maybe, Yes };
  Match match = Match::No;
  size_t end = 0;
};
BareCallOpening match_bare_call_opening(std::string_view reply_start);

// Null when the request constrains nothing. Throws splash::Error for a schema or grammar
// this engine cannot compile (naming the keyword) or a tool_choice naming no tool.
// Compiled constraints are kept in the process's constraint_cache() (constraint_cache.h).
std::shared_ptr<const OutputConstraints> compile_output_constraints(const ChatRequest& request);
class ConstraintCache;
ConstraintCache& constraint_cache();

// The vocabulary, as constrained decoding sees it: each token's bytes, with special tokens
// left out (a grammar never produces them).
std::shared_ptr<const grammar::TokenTrie> build_token_trie(const tokenizer::Tokenizer& tokenizer);

// Drives one generation under OutputConstraints; see the file comment.
class ReplyShaper {
 public:
  ReplyShaper(std::shared_ptr<const OutputConstraints> constraints, const tokenizer::Tokenizer& tokenizer,
              std::shared_ptr<const grammar::TokenTrie> trie);

  bool active() const { return constraints_ != nullptr; }
  // Whether `token` may come next.
  bool allows(int32_t token) const;
  // allowed[id] = 1 for every token that may come next (the slow path).
  void fill_mask(std::vector<uint8_t>& allowed) const;

  // Whether generated tokens are still the reply's text (shown by the caller) or tool calls.
  bool in_text() const { return !calls_started_; }
  // The reply's first bytes may still turn out to be a bare JSON call: the caller holds its
  // text back until this is false (text after all, or the call began, in_text() false).
  bool undecided() const { return undecided_; }
  // The call began as a bare JSON object (its opening text is the call's, not the reply's).
  bool bare_call() const { return bare_; }
  // Records an accepted token. Tool-call bytes, including those after a "<tool_call>" that
  // this token completes, go to the tool-call stream, whose updates are appended.
  void accept(int32_t token, std::vector<ToolCallUpdate>& updates);
  // At the end of generation: a call cut short is dropped, a complete bare call is finished
  // (see ToolCallStream::finish).
  void finish(std::vector<ToolCallUpdate>& updates);
  // The text that opens a call; the caller's text stream must stop before showing it.
  std::string_view tool_call_marker() const;
  bool calls_enabled() const;
  // A step of the reply's grammar was refused for passing the matcher's bound on parse
  // states: the constraint can no longer be followed exactly.
  bool overflowed() const;
  // The reply is complete and nothing may follow (a structured text or the last allowed call).
  bool finished() const;

  const std::vector<chat::ToolCall>& calls() const { return stream_.calls(); }

 private:
  void push_call_bytes(std::string_view bytes, std::vector<ToolCallUpdate>& updates);
  bool end_allowed() const;
  bool text_allows(std::string_view bytes) const;
  std::optional<size_t> marker_end(std::string_view bytes) const;

  std::shared_ptr<const OutputConstraints> constraints_;
  const tokenizer::Tokenizer& tokenizer_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  std::optional<grammar::Matcher> text_;   // the output format's matcher, while in text
  std::optional<grammar::Matcher> call_;   // the current call's (or the next call's) matcher
  bool calls_started_ = false;
  bool call_open_ = false;  // inside a call (between <tool_call> and </tool_call>)
  bool bare_ = false;       // the call is a bare JSON one (ends with the reply)
  bool undecided_ = false;  // the reply so far may still open a bare JSON call
  std::string reply_start_; // the reply's bytes while undecided
  size_t marker_to_skip_ = 0;  // bytes of a required first call's "<tool_call>" still to come
  std::string marker_tail_;  // the last bytes of free text, to find a marker split over tokens
  ToolCallStream stream_;
};

}  // namespace splash::engine
