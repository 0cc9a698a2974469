#include "engine/output_constraints.h"

#include <algorithm>
#include <cctype>

#include "chat/tool_prompt.h"
#include "common/error.h"
#include "engine/constraint_cache.h"
#include "grammar/grammar_builder.h"

namespace splash::engine {

namespace {

using grammar::GrammarBuilder;

// A function's arguments: its schema, or (not strict, a keyword the engine cannot enforce)
// any JSON object.
GrammarBuilder::Id function_arguments(GrammarBuilder& b, const chat::ToolSpec& tool) {
  try {
    return b.json_schema(tool.parameters);
  } catch (const Error& e) {
    if (tool.strict) fail("tool '{}': {}", tool.name, e.what());
    return b.json_object();
  }
}

// One call's body: "\n", then a function call in the fixed JSON layout or a custom tool's
// name line and raw input, then "\n</tool_call>".
GrammarBuilder::Id call_body(GrammarBuilder& b, const ChatRequest& request) {
  std::vector<GrammarBuilder::Id> alternatives;
  for (const chat::ToolSpec& tool : request.tools) {
    if (request.tool_choice == ToolChoice::Named && tool.name != request.tool_choice_name) continue;
    if (tool.kind == chat::ToolSpec::Kind::Function) {
      const GrammarBuilder::Id arguments = function_arguments(b, tool);
      alternatives.push_back(b.sequence({b.literal(std::string(chat::kFunctionCallNamePrefix) + tool.name +
                                                   std::string(chat::kFunctionCallArgumentsPrefix)),
                                         arguments, b.literal(chat::kFunctionCallSuffix)}));
    } else {
      GrammarBuilder::Id input;
      if (tool.lark_grammar.empty()) {
        input = b.repeat(b.any_byte(), 0, -1);
      } else {
        try {
          input = b.lark(tool.lark_grammar);
        } catch (const Error& e) {
          fail("tool '{}': its Lark grammar: {}", tool.name, e.what());
        }
      }
      alternatives.push_back(b.sequence({b.literal(tool.name + "\n"), input}));
    }
  }
  if (alternatives.empty()) fail("tool_choice names '{}', which is not one of the tools", request.tool_choice_name);
  return b.sequence({b.literal(chat::kToolCallBodyStart), b.choice(std::move(alternatives)), b.literal(chat::kToolCallEnd)});
}

// The XML syntax's text value: any bytes after which kXmlParameterClose comes first where
// the value ends. States k = 0..13 of matching "\n</parameter>\n" (D): from k, D[k] leads to
// k + 1 (k + 1 = 14 would be D inside the value), "\n" back to 1, any other byte to 0; the
// value may end in any state but 13 (then D's own first "\n" would complete D early).
GrammarBuilder::Id xml_text_value(GrammarBuilder& b) {
  constexpr std::string_view kClose = chat::kXmlParameterClose;
  const int n = static_cast<int>(kClose.size());
  std::vector<GrammarBuilder::Id> states;
  for (int k = 0; k < n; ++k) states.push_back(b.rule(fmt::format("xml_text_{}", k)));
  for (int k = 0; k < n; ++k) {
    std::vector<GrammarBuilder::Id> next;
    if (k != n - 1) next.push_back(b.literal(""));
    if (k + 1 < n) next.push_back(b.sequence({b.literal(kClose.substr(static_cast<size_t>(k), 1)), states[static_cast<size_t>(k) + 1]}));
    if (kClose[static_cast<size_t>(k)] != '\n') next.push_back(b.sequence({b.literal("\n"), states[1]}));
    grammar::ByteSet others;
    for (int byte = 0; byte < 256; ++byte)
      if (byte != static_cast<unsigned char>(kClose[static_cast<size_t>(k)]) && byte != '\n') others.add(static_cast<uint8_t>(byte));
    next.push_back(b.sequence({b.char_class(others), states[0]}));
    b.define(states[static_cast<size_t>(k)], b.choice(std::move(next)));
  }
  return states[0];
}

// One call's body in the XML syntax: "\n<function=NAME>\n", the parameters, "</function>\n</tool_call>".
GrammarBuilder::Id xml_call_body(GrammarBuilder& b, const ChatRequest& request) {
  const GrammarBuilder::Id text = xml_text_value(b);
  auto parameter = [&](const std::string& name, GrammarBuilder::Id value) {
    return b.sequence({b.literal(std::string(chat::kXmlParameterOpen) + name + ">\n"), value,
                       b.literal(chat::kXmlParameterClose)});
  };
  std::vector<GrammarBuilder::Id> alternatives;
  for (const chat::ToolSpec& tool : request.tools) {
    if (request.tool_choice == ToolChoice::Named && tool.name != request.tool_choice_name) continue;
    std::vector<GrammarBuilder::Id> parts{b.literal(std::string(chat::kXmlFunctionOpen) + tool.name + ">\n")};
    if (tool.kind == chat::ToolSpec::Kind::Custom) {
      GrammarBuilder::Id input = text;
      if (!tool.lark_grammar.empty()) {
        try {
          input = b.lark(tool.lark_grammar);
        } catch (const Error& e) {
          fail("tool '{}': its Lark grammar: {}", tool.name, e.what());
        }
      }
      parts.push_back(parameter(std::string(chat::kCustomToolInput), input));
    } else {
      const auto properties = tool.parameters.find("properties");
      const auto required = tool.parameters.find("required");
      if (properties == tool.parameters.end() || !properties->is_object()) {
        // Parameters not given as plain properties (a root $ref, anyOf, additionalProperties):
        // the syntax cannot follow the schema; any names, JSON or text values, unless strict.
        for (const char* key : {"$ref", "anyOf", "oneOf", "allOf", "if", "not"})
          if (tool.strict && tool.parameters.contains(key))
            fail("tool '{}': the XML tool-call syntax needs its parameters as plain 'properties' (not '{}')", tool.name,
                 key);
        const GrammarBuilder::Id name = b.repeat(b.char_class("a-zA-Z0-9_.:-"), 1, 64);
        parts.push_back(b.repeat(b.sequence({b.literal(chat::kXmlParameterOpen), name, b.literal(">\n"),
                                             b.choice({b.json_value(), text}), b.literal(chat::kXmlParameterClose)}),
                                 0, 64));
      } else {
        for (const auto& [name, schema] : properties->items()) {
          if (name.empty() || name.size() > 200 || name.find_first_of(">\n") != std::string::npos)
            fail("tool '{}': parameter name '{}' cannot be written in the XML tool-call syntax", tool.name, name);
          // Text: the enum's or const's strings as they are, else any text (a string's length
          // or pattern is not held to in this syntax); JSON: the property's schema.
          GrammarBuilder::Id value = text;
          if (chat::xml_value_kind(tool, name) == chat::XmlValueKind::Text && schema.is_object()) {
            std::vector<GrammarBuilder::Id> literals;
            const std::string& parameter_name = name;  // (a lambda may not capture a structured binding)
            auto literal = [&](const nlohmann::json& c) {
              const std::string& v = c.get_ref<const std::string&>();
              // (A value holding the closing markup would end where the parser cuts it.)
              if (v.find(chat::kXmlParameterClose.substr(0, chat::kXmlParameterClose.size() - 1)) != std::string::npos)
                fail("tool '{}': parameter '{}': an allowed value holds the XML syntax's closing markup", tool.name,
                     parameter_name);
              literals.push_back(b.literal(v));
            };
            if (const auto only = schema.find("const"); only != schema.end() && only->is_string()) literal(*only);
            if (const auto choices = schema.find("enum"); choices != schema.end() && choices->is_array())
              for (const auto& c : *choices)
                if (c.is_string()) literal(c);
            if (!literals.empty()) value = b.choice(std::move(literals));
          } else if (chat::xml_value_kind(tool, name) != chat::XmlValueKind::Text) {
            // The property's schema with the root's definitions, so its $refs resolve.
            nlohmann::json alone = schema;
            for (const char* defs : {"$defs", "definitions"})
              if (alone.is_object() && tool.parameters.contains(defs) && !alone.contains(defs))
                alone[defs] = tool.parameters[defs];
            try {
              value = b.json_schema(alone);
            } catch (const Error& e) {
              if (tool.strict) fail("tool '{}': parameter '{}': {}", tool.name, name, e.what());
              value = b.json_value();
            }
            // Strings and other types, or a schema that does not say: JSON, or text as the
            // model writes a string (ToolCallStream reads it as JSON when it parses).
            if (chat::xml_value_kind(tool, name) == chat::XmlValueKind::Either) value = b.choice({value, text});
          }
          const bool must = required != tool.parameters.end() && required->is_array() &&
                            std::find(required->begin(), required->end(), name) != required->end();
          parts.push_back(must ? parameter(name, value) : b.optional(parameter(name, value)));
        }
      }
    }
    parts.push_back(b.literal(chat::kXmlFunctionClose));
    alternatives.push_back(b.sequence(std::move(parts)));
  }
  if (alternatives.empty()) fail("tool_choice names '{}', which is not one of the tools", request.tool_choice_name);
  return b.sequence({b.literal(chat::kToolCallBodyStart), b.choice(std::move(alternatives)), b.literal(chat::kToolCallEnd)});
}

std::shared_ptr<const grammar::Grammar> build_calls(const ChatRequest& request, std::string_view prefix) {
  GrammarBuilder b;
  b.single_line_json();  // the format puts a call's JSON on one line
  const auto body = request.tool_syntax == chat::ToolCallSyntax::Xml ? xml_call_body(b, request) : call_body(b, request);
  return b.build(prefix.empty() ? body : b.sequence({b.literal(prefix), body}));
}

// After `{"name": "`: a known function's name, its arguments, the closing brace and maybe
// the end of a code fence, with the whitespace pretty-printing puts there.
std::shared_ptr<const grammar::Grammar> build_bare_call(const ChatRequest& request) {
  GrammarBuilder b;
  const auto ws = b.repeat(b.char_class(" \t\r\n"), 0, 16);
  std::vector<GrammarBuilder::Id> alternatives;
  for (const chat::ToolSpec& tool : request.tools) {
    if (tool.kind != chat::ToolSpec::Kind::Function) continue;
    const GrammarBuilder::Id arguments = function_arguments(b, tool);
    alternatives.push_back(b.sequence({b.literal(tool.name + "\""), ws, b.literal(","), ws, b.literal("\"arguments\""), ws,
                                       b.literal(":"), ws, arguments, ws, b.literal("}"),
                                       b.optional(b.sequence({ws, b.literal("```")}))}));
  }
  if (alternatives.empty()) return nullptr;
  return b.build(b.choice(std::move(alternatives)));
}

std::shared_ptr<const grammar::Grammar> build_text(const OutputFormat& format) {
  GrammarBuilder b;
  switch (format.kind) {
    case OutputFormat::Kind::Text: return nullptr;
    case OutputFormat::Kind::JsonObject: return b.build(b.json_object());
    case OutputFormat::Kind::JsonSchema: return b.build(b.json_schema(format.schema));
    case OutputFormat::Kind::Lark: return b.build(b.lark(format.grammar));
  }
  return nullptr;
}

// A grammar the matcher cannot follow within Matcher::kMaxStacks parse states near where a
// reply starts (`(a?){5000}b`, or an anyOf of many objects whose properties all open after
// `{"`) is refused here, as the caller's 400, instead of being followed only in part (the
// matcher refuses the bytes that would pass the bound: fail safe, but no longer the schema
// the caller asked for). The probe walks one path into the grammar, kProbeBytes deep: the
// bytes it forces, every byte it allows next tried, then the lowest one that is not
// whitespace taken (into the structure rather than around it). Deeper overflows are caught
// while decoding (the generation fails, saying so).
constexpr int kProbeBytes = 64;

void check_within_bounds(const std::shared_ptr<const grammar::Grammar>& g, std::string_view what) {
  if (!g) return;
  grammar::Matcher matcher(g);
  for (int depth = 0; depth < kProbeBytes && !matcher.overflowed(); ++depth) {
    matcher.accept(matcher.forced_bytes());
    int next = -1;
    for (int byte = 0; byte < 256; ++byte)
      if (matcher.can_accept(std::string(1, static_cast<char>(byte))) && next < 0 && !std::isspace(byte)) next = byte;
    if (next < 0) break;
    matcher.accept(std::string(1, static_cast<char>(next)));
  }
  if (matcher.overflowed())
    fail("the {} is too ambiguous to follow: where the reply starts it needs more than {} parse states at once; "
         "simplify it (fewer alternatives, optional parts or repetitions)",
         what, grammar::Matcher::kMaxStacks);
}

std::shared_ptr<const OutputConstraints> compile_uncached(const ChatRequest& request) {
  auto out = std::make_shared<OutputConstraints>();
  out->tool_choice = request.tool_choice;
  out->syntax = request.tool_syntax;
  if (out->syntax == chat::ToolCallSyntax::Xml) out->tools = request.tools;
  out->parallel_tool_calls = request.parallel_tool_calls && request.tool_choice != ToolChoice::Named;
  out->has_tools = !request.tools.empty();
  if (out->has_tools && request.tool_choice != ToolChoice::None) {
    out->call_body = build_calls(request, {});
    if (request.tool_choice == ToolChoice::Required || request.tool_choice == ToolChoice::Named)
      out->first_call = build_calls(request, chat::kToolCallOpen);
    if (out->parallel_tool_calls) out->next_call = build_calls(request, std::string("\n") + std::string(chat::kToolCallOpen));
  }
  out->text = build_text(request.output_format);
  // (A bare JSON call is how small models of the JSON syntax slip; not this syntax's.)
  if (out->call_body && request.tool_choice == ToolChoice::Auto && !out->text &&
      request.tool_syntax == chat::ToolCallSyntax::Json)
    out->bare_call = build_bare_call(request);
  check_within_bounds(out->text, "response format");
  if (out->call_body) {
    // Each function's arguments where they start too: in the calls' grammars the name and
    // the layout around them come first, and the probe stops at the first choice.
    for (const chat::ToolSpec& tool : request.tools) {
      if (tool.kind != chat::ToolSpec::Kind::Function) continue;
      GrammarBuilder b;
      b.single_line_json();
      check_within_bounds(b.build(function_arguments(b, tool)), fmt::format("parameter schema of tool '{}'", tool.name));
    }
    for (const auto* call : {&out->call_body, &out->first_call, &out->next_call, &out->bare_call})
      check_within_bounds(*call, "tool call grammar");
  }
  return out;
}

bool is_special(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  const auto type = tokenizer.token_type(id);
  return type == tokenizer::TokenType::control || type == tokenizer::TokenType::unknown ||
         type == tokenizer::TokenType::unused;
}

}  // namespace

BareCallOpening match_bare_call_opening(std::string_view text) {
  constexpr size_t kMaxSpace = 16, kMaxLanguage = 16;
  size_t i = 0;
  // Each step: Maybe when the text ends inside it, No when it cannot match.
  auto space = [&] {
    size_t n = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) && n++ < kMaxSpace) ++i;
    return n <= kMaxSpace;
  };
  auto literal = [&](std::string_view word) -> BareCallOpening::Match {
    const size_t n = std::min(word.size(), text.size() - i);
    if (text.substr(i, n) != word.substr(0, n)) return BareCallOpening::Match::No;
    i += n;
    return n < word.size() ? BareCallOpening::Match::Maybe : BareCallOpening::Match::Yes;
  };
  using Match = BareCallOpening::Match;
  if (!space()) return {};
  if (i == text.size()) return {Match::Maybe, 0};
  if (text[i] == '`') {
    if (const auto m = literal("```"); m != Match::Yes) return {m, 0};
    size_t n = 0;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])) && n++ < kMaxLanguage) ++i;
    if (!space()) return {};
  }
  // "{{" too: Qwen2.5-Coder-1.5B's template shows its example call in doubled braces
  // (chat/tool_prompt.h), and the model writes its calls that way; the grammar after the
  // opening closes the object with one brace, so the call is the same.
  for (std::string_view step : {"{", "{?", "", "\"name\"", "", ":", "", "\""}) {
    if (i == text.size()) return {Match::Maybe, 0};
    if (step.empty()) {
      if (!space()) return {};
      continue;
    }
    if (step == "{?") {
      if (text[i] == '{') ++i;
      continue;
    }
    if (const auto m = literal(step); m != Match::Yes) return {m, 0};
  }
  return {Match::Yes, i};
}

std::shared_ptr<const OutputConstraints> compile_output_constraints(const ChatRequest& request) {
  if (request.tools.empty() && request.output_format.kind == OutputFormat::Kind::Text) return nullptr;
  if (request.tool_choice == ToolChoice::Named &&
      std::none_of(request.tools.begin(), request.tools.end(),
                   [&](const chat::ToolSpec& t) { return t.name == request.tool_choice_name; }))
    fail("tool_choice names '{}', which is not one of the tools", request.tool_choice_name);
  return constraint_cache().get(request, compile_uncached);
}

size_t OutputConstraints::memory_bytes() const {
  size_t bytes = sizeof(*this);
  for (const auto& tool : tools) bytes += tool.parameters.dump().size() + tool.lark_grammar.size() + tool.name.size();
  for (const auto* g : {&call_body, &first_call, &next_call, &text, &bare_call})
    if (*g) bytes += (*g)->memory_bytes();
  return bytes;
}

ConstraintCache& constraint_cache() {
  static ConstraintCache cache;
  return cache;
}

std::shared_ptr<const grammar::TokenTrie> build_token_trie(const tokenizer::Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.size());
  for (size_t id = 0; id < bytes.size(); ++id)
    if (!is_special(tokenizer, static_cast<int32_t>(id))) bytes[id] = tokenizer.token_bytes(static_cast<int32_t>(id));
  return std::make_shared<const grammar::TokenTrie>(bytes);
}

// --- ReplyShaper --------------------------------------------------------------------------

ReplyShaper::ReplyShaper(std::shared_ptr<const OutputConstraints> constraints, const tokenizer::Tokenizer& tokenizer,
                         std::shared_ptr<const grammar::TokenTrie> trie)
    : constraints_(std::move(constraints)), tokenizer_(tokenizer), trie_(std::move(trie)) {
  if (!constraints_) return;
  stream_ = ToolCallStream(constraints_->syntax, constraints_->tools);
  if (constraints_->first_call) {
    calls_started_ = true;
    call_open_ = true;
    call_.emplace(constraints_->first_call);
    marker_to_skip_ = chat::kToolCallOpen.size();
  } else if (constraints_->text) {
    text_.emplace(constraints_->text);
  }
  undecided_ = constraints_->bare_call != nullptr;
}

std::string_view ReplyShaper::tool_call_marker() const { return chat::kToolCallOpen; }

bool ReplyShaper::calls_enabled() const { return constraints_ && constraints_->call_body != nullptr && !text_; }

std::optional<size_t> ReplyShaper::marker_end(std::string_view bytes) const {
  const std::string joined = marker_tail_ + std::string(bytes);
  const size_t at = joined.find(chat::kToolCallOpen);
  if (at == std::string::npos) return std::nullopt;
  // The position in `bytes` just after the marker.
  return at + chat::kToolCallOpen.size() - marker_tail_.size();
}

bool ReplyShaper::text_allows(std::string_view bytes) const {
  if (text_) return text_->can_accept(bytes);
  if (undecided_) {
    const std::string joined = reply_start_ + std::string(bytes);
    const auto opening = match_bare_call_opening(joined);
    if (opening.match == BareCallOpening::Match::Yes) {
      grammar::Matcher fresh(constraints_->bare_call);
      return fresh.can_accept(std::string_view(joined).substr(opening.end));
    }
  }
  const auto end = marker_end(bytes);
  if (!end) return true;
  if (!calls_enabled() || constraints_->tool_choice == ToolChoice::None) return false;
  grammar::Matcher fresh(constraints_->call_body);
  return fresh.can_accept(bytes.substr(*end));
}

bool ReplyShaper::end_allowed() const {
  if (!calls_started_) return !text_ || text_->is_complete();
  if (bare_) return call_ && call_->is_complete();
  return !call_open_;
}

bool ReplyShaper::allows(int32_t token) const {
  if (!constraints_) return true;
  if (tokenizer_.is_end_of_generation(token)) return end_allowed();
  if (is_special(tokenizer_, token)) return !calls_started_ && !text_;  // free text: stop texts handle them
  const std::string& bytes = tokenizer_.token_bytes(token);
  if (!calls_started_) return text_allows(bytes);
  if (!call_) return false;  // the last allowed call is done
  return call_->can_accept(bytes);
}

void ReplyShaper::fill_mask(std::vector<uint8_t>& allowed) const {
  allowed.assign(tokenizer_.size(), 0);
  if (calls_started_ ? static_cast<bool>(call_) : static_cast<bool>(text_)) {
    (calls_started_ ? *call_ : *text_).fill_mask(*trie_, allowed);
    allowed.resize(tokenizer_.size(), 0);
  } else if (!calls_started_) {
    for (size_t id = 0; id < allowed.size(); ++id) allowed[id] = allows(static_cast<int32_t>(id)) ? 1 : 0;
    return;
  }
  const bool end = end_allowed();
  for (size_t id = 0; id < allowed.size(); ++id)
    if (tokenizer_.is_end_of_generation(static_cast<int32_t>(id))) allowed[id] = end ? 1 : 0;
}

void ReplyShaper::accept(int32_t token, std::vector<ToolCallUpdate>& updates) {
  if (!constraints_ || tokenizer_.is_end_of_generation(token)) return;
  std::string_view bytes = tokenizer_.token_bytes(token);
  if (!calls_started_) {
    if (text_) {
      text_->accept(bytes);
      return;
    }
    if (undecided_) {
      reply_start_ += bytes;
      const auto opening = match_bare_call_opening(reply_start_);
      if (opening.match == BareCallOpening::Match::Yes) {
        undecided_ = false;
        calls_started_ = call_open_ = bare_ = true;
        call_.emplace(constraints_->bare_call);
        const std::string rest = reply_start_.substr(opening.end);
        call_->accept(rest);
        stream_.begin_bare_call();
        push_call_bytes(rest, updates);
        return;
      }
      if (opening.match == BareCallOpening::Match::No) undecided_ = false;  // text after all
    }
    if (const auto end = calls_enabled() ? marker_end(bytes) : std::nullopt) {
      calls_started_ = true;
      call_open_ = true;
      call_.emplace(constraints_->call_body);
      marker_tail_.clear();
      bytes = bytes.substr(*end);
      call_->accept(bytes);
      push_call_bytes(bytes, updates);
      return;
    }
    marker_tail_ += bytes;
    if (marker_tail_.size() >= chat::kToolCallOpen.size())
      marker_tail_.erase(0, marker_tail_.size() - (chat::kToolCallOpen.size() - 1));
    return;
  }
  if (!call_) return;
  call_->accept(bytes);
  call_open_ = true;
  // A required first call's grammar starts with the marker itself, which the stream (made
  // to start after it) must not see.
  const size_t skip = std::min(marker_to_skip_, bytes.size());
  marker_to_skip_ -= skip;
  push_call_bytes(bytes.substr(skip), updates);
}

void ReplyShaper::push_call_bytes(std::string_view bytes, std::vector<ToolCallUpdate>& updates) {
  const size_t before = updates.size();
  stream_.push(bytes, updates);
  for (size_t i = before; i < updates.size(); ++i) {
    if (updates[i].kind != ToolCallUpdate::Kind::Finished) continue;
    call_open_ = false;
    if (constraints_->next_call) call_.emplace(constraints_->next_call);
    else call_.reset();
  }
}

void ReplyShaper::finish(std::vector<ToolCallUpdate>& updates) {
  if (calls_started_) stream_.finish(bare_ && call_ && call_->is_complete(), updates);
}

bool ReplyShaper::overflowed() const {
  return (text_ && text_->overflowed()) || (call_ && call_->overflowed());
}

bool ReplyShaper::finished() const {
  if (!constraints_) return false;
  if (bare_) return call_ && call_->is_dead();
  if (calls_started_) return !call_open_ && !call_;
  return text_ && text_->is_complete() && text_->is_dead();
}

}  // namespace splash::engine
