// Lark grammar text -> grammar expressions (see lark.h for the subset).
// A hand-written lexer + recursive-descent parser over Lark's own grammar syntax; every rule
// and terminal becomes a named builder rule, so forward references and recursion just work.
#include "grammar/lark.h"

#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/grammar_builder.h"
#include "grammar/regex.h"

namespace splash::grammar {

namespace {

using Id = GrammarBuilder::Id;
constexpr int kMaxLarkDepth = 200;

// Lark's common.lark terminals, written as regexes of our subset.
const std::map<std::string, std::string>& common_terminals() {
  static const std::map<std::string, std::string> kCommon = {
      {"DIGIT", "[0-9]"},
      {"HEXDIGIT", "[a-fA-F0-9]"},
      {"INT", "[0-9]+"},
      {"SIGNED_INT", "[+-]?[0-9]+"},
      {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
      {"FLOAT", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?"},
      {"SIGNED_FLOAT", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?)"},
      {"NUMBER", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+"},
      {"SIGNED_NUMBER", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)"},
      {"LCASE_LETTER", "[a-z]"},
      {"UCASE_LETTER", "[A-Z]"},
      {"LETTER", "[A-Za-z]"},
      {"WORD", "[A-Za-z]+"},
      {"CNAME", "[_A-Za-z][_A-Za-z0-9]*"},
      {"ESCAPED_STRING", "\"([^\"\\\\\\n]|\\\\[^\\n])*\""},
      {"WS_INLINE", "[ \\t]+"},
      {"WS", "[ \\t\\f\\r\\n]+"},
      {"CR", "\\r"},
      {"LF", "\\n"},
      {"NEWLINE", "(\\r?\\n)+"},
      {"SH_COMMENT", "#[^\\n]*"},
      {"CPP_COMMENT", "//[^\\n]*"},
  };
  return kCommon;
}

struct Token {
  enum Kind { name, string, regex, number, punct, newline, eof } kind;
  std::string text;   // name/number/punct text; string: decoded bytes; regex: the pattern
  std::string flags;  // string: "i" or ""; regex: its flags
  int line, col;
};

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    while (true) {
      skip_space();
      if (i_ >= s_.size()) break;
      const int line = line_, col = col_;
      const char c = s_[i_];
      if (c == '\n') {
        advance();
        if (out.empty() || out.back().kind != Token::newline) out.push_back({Token::newline, "", "", line, col});
        continue;
      }
      if (c == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '/') {
        while (i_ < s_.size() && s_[i_] != '\n') advance();
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::string t;
        while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) t += advance();
        out.push_back({Token::name, t, "", line, col});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        std::string t;
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) t += advance();
        out.push_back({Token::number, t, "", line, col});
      } else if (c == '"') {
        out.push_back(string_token(line, col));
      } else if (c == '/') {
        out.push_back(regex_token(line, col));
      } else if (c == '.' && i_ + 1 < s_.size() && s_[i_ + 1] == '.') {
        advance(), advance();
        out.push_back({Token::punct, "..", "", line, col});
      } else if (c == '-' && i_ + 1 < s_.size() && s_[i_ + 1] == '>') {
        advance(), advance();
        out.push_back({Token::punct, "->", "", line, col});
      } else if (std::string_view(":|()[]?*+~.%,{}!").find(c) != std::string_view::npos) {
        advance();
        out.push_back({Token::punct, std::string(1, c), "", line, col});
      } else {
        fail("lark grammar: line {}:{}: unexpected character '{}'", line, col, c);
      }
    }
    out.push_back({Token::eof, "", "", line_, col_});
    return out;
  }

 private:
  char advance() {
    const char c = s_[i_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) advance();
    // A backslash-newline continues the line.
    if (i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == '\n') {
      advance(), advance();
      skip_space();
    }
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // "..." with Python-style escapes, then an optional i flag.
  Token string_token(int line, int col) {
    advance();
    std::string t;
    while (true) {
      if (i_ >= s_.size() || s_[i_] == '\n') fail("lark grammar: line {}:{}: unterminated string", line, col);
      const char c = advance();
      if (c == '"') break;
      if (c != '\\') {
        t += c;
        continue;
      }
      if (i_ >= s_.size()) fail("lark grammar: line {}:{}: unterminated string", line, col);
      const char e = advance();
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) {
            fail("lark grammar: line {}:{}: bad escape in string", line_, col_);
          }
          const char h = advance();
          v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case 'n': t += '\n'; break;
        case 't': t += '\t'; break;
        case 'r': t += '\r'; break;
        case 'f': t += '\f'; break;
        case 'v': t += '\v'; break;
        case '0': t += '\0'; break;
        case '\\': t += '\\'; break;
        case '"': t += '"'; break;
        case '\'': t += '\''; break;
        case 'x': t += static_cast<char>(hex(2)); break;
        case 'u': append_utf8(t, hex(4)); break;
        case 'U': append_utf8(t, hex(8)); break;
        default: t += '\\', t += e;  // Python keeps unknown escapes as written
      }
    }
    std::string flags;
    if (i_ < s_.size() && s_[i_] == 'i') flags = std::string(1, advance());
    return {Token::string, t, flags, line, col};
  }

  Token regex_token(int line, int col) {
    advance();
    std::string t;
    while (true) {
      if (i_ >= s_.size() || s_[i_] == '\n') fail("lark grammar: line {}:{}: unterminated regex", line, col);
      const char c = advance();
      if (c == '/') break;
      if (c == '\\' && i_ < s_.size() && s_[i_] == '/') {
        t += advance();  // \/ is a plain slash
        continue;
      }
      t += c;
      if (c == '\\' && i_ < s_.size()) t += advance();
    }
    std::string flags;
    while (i_ < s_.size() && std::string_view("imslux").find(s_[i_]) != std::string_view::npos) flags += advance();
    return {Token::regex, t, flags, line, col};
  }

  std::string_view s_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
};

class LarkCompiler {
 public:
  LarkCompiler(GrammarBuilder& b, std::string_view text) : b_(b), t_(Lexer(text).run()) {}

  Id compile() {
    while (peek_raw().kind != Token::eof) {
      if (peek_raw().kind == Token::newline) {
        ++p_;
        continue;
      }
      statement();
    }
    for (const auto& [name, ref] : refs_) {
      if (!defined_.count(name)) {
        fail("lark grammar: line {}:{}: '{}' is used but never defined", ref.line, ref.col, name);
      }
    }
    if (!defined_.count("start")) fail("lark grammar: no 'start' rule");
    return symbol("start");
  }

 private:
  [[noreturn]] void error(const Token& at, std::string_view what) const {
    fail("lark grammar: line {}:{}: {}", at.line, at.col, what);
  }

  const Token& peek_raw() const { return t_[p_]; }
  // Inside ( ) and [ ] newlines mean nothing.
  const Token& peek() {
    while (depth_ > 0 && t_[p_].kind == Token::newline) ++p_;
    return t_[p_];
  }
  const Token& next() {
    peek();
    return t_[p_++];
  }
  bool is_punct(const Token& t, std::string_view s) const { return t.kind == Token::punct && t.text == s; }
  void expect(std::string_view s) {
    const Token& t = next();
    if (!is_punct(t, s)) error(t, fmt::format("expected '{}'", s));
  }

  Id symbol(const std::string& name) {
    auto [it, fresh] = symbols_.try_emplace(name, -1);
    if (fresh) it->second = b_.rule(name);
    return it->second;
  }

  void statement() {
    const Token& first = next();
    if (is_punct(first, "%")) return directive(first);
    const Token* name = &first;
    if (is_punct(first, "?") || is_punct(first, "!")) name = &next();
    if (name->kind != Token::name) error(*name, "expected a rule or terminal definition");
    if (is_punct(peek(), "{")) error(peek(), "rule templates are unsupported");
    if (is_punct(peek(), ".")) {  // priority: parsed, ignored
      next();
      if (is_punct(peek(), "-")) next();
      if (next().kind != Token::number) error(*name, "expected a priority number after '.'");
    }
    expect(":");
    if (defined_.count(name->text)) error(*name, fmt::format("'{}' is defined twice", name->text));
    defined_.insert(name->text);
    const Id body = expansions(0);
    b_.define(symbol(name->text), body);
    end_of_statement();
  }

  void end_of_statement() {
    const Token& t = peek_raw();
    if (t.kind == Token::newline) {
      ++p_;
    } else if (t.kind != Token::eof) {
      error(t, "unexpected token");
    }
  }

  void directive(const Token& percent) {
    const Token& kw = next();
    if (kw.kind != Token::name) error(kw, "expected a directive after '%'");
    if (kw.text == "ignore") {
      error(kw, "%ignore is unsupported: write the whitespace into the rules explicitly");
    }
    if (kw.text != "import") error(kw, fmt::format("%{} is unsupported", kw.text));
    // %import common.NAME [-> ALIAS]   or   %import common (A, B, ...)
    const Token& module = next();
    if (module.kind != Token::name || module.text != "common") {
      error(module, "only %import common.X is supported");
    }
    std::vector<std::pair<std::string, const Token*>> names;
    if (is_punct(peek(), ".")) {
      next();
      const Token& n = next();
      if (n.kind != Token::name) error(n, "expected a terminal name");
      std::string alias = n.text;
      if (is_punct(peek(), "->")) {
        next();
        const Token& a = next();
        if (a.kind != Token::name) error(a, "expected an alias name");
        alias = a.text;
      }
      names.emplace_back(n.text, &n);
      import_common(n, alias);
    } else if (is_punct(peek(), "(")) {
      ++depth_;
      next();
      while (true) {
        const Token& n = next();
        if (n.kind != Token::name) error(n, "expected a terminal name");
        import_common(n, n.text);
        const Token& sepr = next();
        if (is_punct(sepr, ")")) break;
        if (!is_punct(sepr, ",")) error(sepr, "expected ',' or ')'");
      }
      --depth_;
    } else {
      error(percent, "bad %import");
    }
    end_of_statement();
  }

  void import_common(const Token& n, const std::string& alias) {
    const auto& common = common_terminals();
    auto it = common.find(n.text);
    if (it == common.end()) error(n, fmt::format("common.{} is not supported", n.text));
    if (defined_.count(alias)) error(n, fmt::format("'{}' is defined twice", alias));
    defined_.insert(alias);
    b_.define(symbol(alias), b_.regex(it->second));
  }

  Id expansions(int depth) {
    if (depth > kMaxLarkDepth) error(peek(), "nesting too deep");
    std::vector<Id> alts{alias(depth)};
    while (true) {
      if (is_punct(peek(), "|")) {
        next();
        alts.push_back(alias(depth));
        continue;
      }
      // A newline followed by '|' continues the alternatives.
      size_t q = p_;
      while (t_[q].kind == Token::newline) ++q;
      if (q != p_ && is_punct(t_[q], "|")) {
        p_ = q + 1;
        alts.push_back(alias(depth));
        continue;
      }
      break;
    }
    return b_.choice(std::move(alts));
  }

  Id alias(int depth) {
    const Id e = expansion(depth);
    if (is_punct(peek(), "->")) {
      next();
      if (next().kind != Token::name) error(t_[p_ - 1], "expected an alias name after '->'");
    }
    return e;
  }

  bool starts_atom(const Token& t) const {
    return t.kind == Token::name || t.kind == Token::string || t.kind == Token::regex || is_punct(t, "(") ||
           is_punct(t, "[");
  }

  Id expansion(int depth) {
    std::vector<Id> items;
    while (starts_atom(peek())) items.push_back(expr(depth));
    if (items.empty()) return b_.literal("");
    return b_.sequence(std::move(items));
  }

  Id expr(int depth) {
    Id a = atom(depth);
    while (true) {
      const Token& t = peek();
      if (is_punct(t, "?")) {
        next();
        a = b_.repeat(a, 0, 1);
      } else if (is_punct(t, "*")) {
        next();
        a = b_.repeat(a, 0, -1);
      } else if (is_punct(t, "+")) {
        next();
        a = b_.repeat(a, 1, -1);
      } else if (is_punct(t, "~")) {
        next();
        const Token& lo = next();
        if (lo.kind != Token::number) error(lo, "expected a count after '~'");
        int min = std::stoi(lo.text.substr(0, 6)), max = min;
        if (is_punct(peek(), "..")) {
          next();
          const Token& hi = next();
          if (hi.kind != Token::number) error(hi, "expected a count after '..'");
          max = std::stoi(hi.text.substr(0, 6));
        }
        if (max < min) error(lo, "repetition range with max < min");
        a = b_.repeat(a, min, max);
      } else {
        return a;
      }
    }
  }

  Id atom(int depth) {
    const Token& t = next();
    if (is_punct(t, "(") || is_punct(t, "[")) {
      const bool optional = t.text == "[";
      ++depth_;
      const Id inner = expansions(depth + 1);
      const Token& close = next();
      --depth_;
      if (!is_punct(close, optional ? "]" : ")")) error(close, optional ? "expected ']'" : "expected ')'");
      return optional ? b_.repeat(inner, 0, 1) : inner;
    }
    if (t.kind == Token::name) {
      refs_.try_emplace(t.text, t);
      return symbol(t.text);
    }
    if (t.kind == Token::string) {
      if (is_punct(peek(), "..")) {
        next();
        const Token& hi = next();
        if (hi.kind != Token::string) error(hi, "expected a string after '..'");
        return range(t, hi);
      }
      return string_literal(t);
    }
    if (t.kind == Token::regex) {
      std::string flags;
      for (char f : t.flags) {
        if (f == 'i' || f == 's') {
          flags += f;
        } else if (f != 'u') {
          error(t, fmt::format("regex flag '{}' is unsupported", f));
        }
      }
      try {
        return b_.regex(t.text, flags);
      } catch (const Error& e) {
        error(t, e.what());
      }
    }
    error(t, "expected a rule, terminal, string, regex, ( or [");
  }

  Id string_literal(const Token& t) {
    if (t.flags != "i") return b_.literal(t.text);
    std::vector<Id> parts;
    for (char c : t.text) {
      const auto u = static_cast<unsigned char>(c);
      if (std::isalpha(u)) {
        ByteSet s;
        s.add(static_cast<uint8_t>(std::tolower(u)));
        s.add(static_cast<uint8_t>(std::toupper(u)));
        parts.push_back(b_.char_class(s));
      } else {
        parts.push_back(b_.literal(std::string(1, c)));
      }
    }
    return b_.sequence(std::move(parts));
  }

  static std::string regex_escape_cp(const std::string& s) {
    // One UTF-8 character as \x{...} for a regex class.
    uint32_t cp = static_cast<uint8_t>(s[0]);
    const int len = cp < 0x80 ? 1 : (cp >> 5) == 6 ? 2 : (cp >> 4) == 14 ? 3 : 4;
    cp = len == 1 ? cp : len == 2 ? (cp & 0x1F) : len == 3 ? (cp & 0x0F) : (cp & 0x07);
    for (int k = 1; k < len && static_cast<size_t>(k) < s.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[static_cast<size_t>(k)]) & 0x3F);
    return fmt::format("\\x{{{:x}}}", cp);
  }

  Id range(const Token& lo, const Token& hi) {
    auto one_char = [](const std::string& s) {
      if (s.empty()) return false;
      const auto c = static_cast<uint8_t>(s[0]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      return s.size() == len;
    };
    if (!one_char(lo.text) || !one_char(hi.text)) error(lo, "a \"a\"..\"z\" range needs single characters");
    try {
      return b_.regex(fmt::format("[{}-{}]", regex_escape_cp(lo.text), regex_escape_cp(hi.text)));
    } catch (const Error& e) {
      error(lo, e.what());
    }
  }

  GrammarBuilder& b_;
  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
  std::map<std::string, Id> symbols_;
  std::map<std::string, Token> refs_;  // first reference of each name, for errors
  std::set<std::string> defined_;
};

}  // namespace

GrammarBuilder::Id GrammarBuilder::lark(std::string_view lark_grammar) { return LarkCompiler(*this, lark_grammar).compile(); }

std::shared_ptr<const Grammar> compile_lark(std::string_view text) {
  GrammarBuilder b;
  return b.build(b.lark(text));
}

}  // namespace splash::grammar
