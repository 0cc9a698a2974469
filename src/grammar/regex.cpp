// The regex subset (see regex.h): a recursive-descent parser that builds grammar expressions
// directly. Character classes are sets of code point ranges so that negation and Unicode
// ranges are exact; they are lowered to UTF-8 byte-range sequences at the end.
#include "grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace splash::grammar {

namespace {

using Id = GrammarBuilder::Id;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxRepeat = 100000;
constexpr int kMaxRegexDepth = 200;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges complement(const Ranges& in) {
  Ranges r = normalized(in), out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Splits [lo, hi] (one encoded length, no surrogates) into pieces whose UTF-8 encodings are
// exactly the products of per-byte ranges: each byte position independently spans a range.
void utf8_pieces(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  const int len = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
  for (int i = 1; i < len; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_pieces(lo, lo | m, out);
        utf8_pieces((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_pieces(lo, (hi & ~m) - 1, out);
        utf8_pieces(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = encode_utf8(lo), b = encode_utf8(hi);
  std::vector<std::pair<uint8_t, uint8_t>> piece;
  for (size_t i = 0; i < a.size(); ++i) piece.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(piece));
}

void utf8_split(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  // Encoded-length boundaries and the surrogate gap.
  static constexpr std::pair<uint32_t, uint32_t> kBands[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
  for (const auto& [blo, bhi] : kBands) {
    const uint32_t a = std::max(lo, blo), b = std::min(hi, bhi);
    if (a <= b) utf8_pieces(a, b, out);
  }
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, const RegexOptions& o) : b_(b), p_(p), o_(o) {}

  Id parse() {
    const Id result = alternation(0);
    if (i_ < p_.size()) error(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    return result;
  }

 private:
  [[noreturn]] void error(std::string_view what) const {
    fail("regex /{}/: {} at offset {}", p_, what, i_);
  }

  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  Id alternation(int depth) {
    if (depth > kMaxRegexDepth) error("nesting too deep");
    std::vector<Id> alts{concatenation(depth)};
    while (more() && peek() == '|') {
      ++i_;
      alts.push_back(concatenation(depth));
    }
    return b_.choice(std::move(alts));
  }

  Id concatenation(int depth) {
    std::vector<Id> parts;
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '^' || peek() == '$') {  // the match is always the whole text
        ++i_;
        continue;
      }
      Id atom = this->atom(depth);
      atom = quantifiers(atom);
      parts.push_back(atom);
    }
    if (parts.empty()) return b_.literal("");
    return b_.sequence(std::move(parts));
  }

  bool read_int(int& out) {
    const size_t start = i_;
    long v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) error("repetition count too large");
      ++i_;
    }
    out = static_cast<int>(v);
    return i_ > start;
  }

  Id quantifiers(Id atom) {
    while (more()) {
      const char c = peek();
      int min = 0, max = -1;
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1, ++i_;
      } else if (c == '?') {
        max = 1, ++i_;
      } else if (c == '{') {
        const size_t save = i_;
        ++i_;
        if (!read_int(min) && !(more() && peek() == ',')) {  // {,n} is {0,n}, as in Python
          i_ = save;  // not a quantifier: a literal '{' (handled by atom)
          return atom;
        }
        if (more() && peek() == ',') {
          ++i_;
          if (!read_int(max)) max = -1;
        } else {
          max = min;
        }
        if (!more() || peek() != '}') {
          i_ = save;
          return atom;
        }
        ++i_;
        if (max != -1 && max < min) error("repetition {m,n} with n < m");
      } else {
        return atom;
      }
      if (more() && (peek() == '?' || peek() == '+')) ++i_;  // lazy / possessive: same language
      atom = b_.repeat(atom, min, max);
    }
    return atom;
  }

  Id atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        ++i_;
        if (!more()) error("unterminated group");
        const char k = peek();
        if (k == ':') {
          ++i_;
        } else if (k == '=' || k == '!') {
          error("lookahead (?= / (?! is not supported");
        } else if (k == '<' && i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!')) {
          error("lookbehind (?<= / (?<! is not supported");
        } else if (k == 'P' || k == '<') {
          if (k == 'P') ++i_;
          if (!more() || peek() != '<') error("unsupported group syntax");
          while (more() && peek() != '>') ++i_;
          if (!more()) error("unterminated group name");
          ++i_;
        } else {
          error(std::string("unsupported group (?") + k + " (inline flags, conditionals...)");
        }
      }
      const Id inner = alternation(depth + 1);
      if (!more() || peek() != ')') error("missing ')'");
      ++i_;
      return inner;
    }
    if (c == '[') return lower(class_body());
    if (c == '.') {
      ++i_;
      return o_.dot_all ? lower({{0, kMaxCodePoint}}) : lower(complement({{'\n', '\n'}}));
    }
    if (c == '*' || c == '+' || c == '?') error("quantifier without anything to repeat");
    if (c == '\\') {
      Ranges r;
      escape(r, false);
      return lower(r);
    }
    // Anything else, '{' that did not start a quantifier included, is a literal character.
    return lower({{single_code_point(), 0}}, true);
  }

  uint32_t single_code_point() {
    const auto c = static_cast<uint8_t>(p_[i_]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i_ + static_cast<size_t>(len) > p_.size()) len = 1;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(p_[i_ + static_cast<size_t>(k)]) & 0x3F);
    i_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (!more() || !std::isxdigit(static_cast<unsigned char>(peek()))) error("bad hex escape");
      const char h = peek();
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i_;
    }
    return v;
  }

  // Reads one escape (i_ at the backslash) into r. in_class: \b means backspace.
  void escape(Ranges& r, bool in_class) {
    ++i_;
    if (!more()) error("trailing backslash");
    const char e = peek();
    ++i_;
    auto add = [&](uint32_t lo, uint32_t hi) { r.emplace_back(lo, hi); };
    const Ranges digit{{'0', '9'}};
    const Ranges word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space{{'\t', '\r'}, {' ', ' '}};
    switch (e) {
      case 'n': add('\n', '\n'); break;
      case 't': add('\t', '\t'); break;
      case 'r': add('\r', '\r'); break;
      case 'f': add('\f', '\f'); break;
      case 'v': add('\v', '\v'); break;
      case '0': add(0, 0); break;
      case 'a': add(7, 7); break;
      case 'e': add(27, 27); break;
      case 'x': {
        if (more() && peek() == '{') {
          ++i_;
          uint32_t v = 0;
          while (more() && peek() != '}') v = v * 16 + hex(1);
          if (!more()) error("bad \\x{...} escape");
          ++i_;
          add(v, v);
        } else {
          const uint32_t v = hex(2);
          add(v, v);
        }
        break;
      }
      case 'u': {
        const uint32_t v = hex(4);
        add(v, v);
        break;
      }
      case 'U': {
        const uint32_t v = hex(8);
        if (v > kMaxCodePoint) error("code point out of range");
        add(v, v);
        break;
      }
      case 'd': r.insert(r.end(), digit.begin(), digit.end()); break;
      case 'w': r.insert(r.end(), word.begin(), word.end()); break;
      case 's': r.insert(r.end(), space.begin(), space.end()); break;
      case 'D': for (auto x : complement(digit)) r.push_back(x); break;
      case 'W': for (auto x : complement(word)) r.push_back(x); break;
      case 'S': for (auto x : complement(space)) r.push_back(x); break;
      case 'b':
        if (in_class) {
          add(8, 8);
          break;
        }
        --i_;
        error("word boundary \\b is not supported");
      default:
        if (e >= '1' && e <= '9') {
          --i_;
          error("backreference is not supported");
        }
        if (std::isalnum(static_cast<unsigned char>(e))) {
          --i_;
          error(std::string("unsupported escape \\") + e);
        }
        --i_;
        {
          const uint32_t cp = single_code_point();
          add(cp, cp);
        }
    }
  }

  Ranges class_body() {
    ++i_;  // '['
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++i_;
    }
    Ranges r;
    bool first = true;
    while (true) {
      if (!more()) error("unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        Ranges single;
        escape(single, true);
        if (single.size() != 1 || single[0].first != single[0].second) {
          r.insert(r.end(), single.begin(), single.end());
          continue;
        }
        lo = single[0].first;
      } else {
        lo = single_code_point();
      }
      uint32_t hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          Ranges single;
          escape(single, true);
          if (single.size() != 1 || single[0].first != single[0].second) error("bad class range");
          hi = single[0].first;
        } else {
          hi = single_code_point();
        }
        if (hi < lo) error("class range out of order");
      }
      r.emplace_back(lo, hi);
    }
    ++i_;  // ']'
    return negated ? complement(r) : r;
  }

  // A set of code points as an expression over bytes.
  Id lower(Ranges r, bool single = false) {
    if (single) r[0].second = r[0].first;
    if (o_.case_insensitive) {
      const Ranges orig = r;
      for (auto [lo, hi] : orig) {
        for (uint32_t c = std::max<uint32_t>(lo, 'A'); c <= std::min<uint32_t>(hi, 'Z'); ++c) r.emplace_back(c + 32, c + 32);
        for (uint32_t c = std::max<uint32_t>(lo, 'a'); c <= std::min<uint32_t>(hi, 'z'); ++c) r.emplace_back(c - 32, c - 32);
      }
    }
    r = normalized(r);
    ByteSet ascii;
    std::vector<Id> alts;
    Ranges wide;
    for (auto [lo, hi] : r) {
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c) {
        const bool special = c < 0x20 || c == '"' || c == '\\';
        if (o_.json_escape && special) {
          alts.push_back(b_.literal(json_escaped(c)));
        } else {
          ascii.add(static_cast<uint8_t>(c));
        }
      }
      if (hi >= 0x80) wide.emplace_back(std::max<uint32_t>(lo, 0x80), hi);
    }
    if (!ascii.empty()) alts.push_back(b_.char_class(ascii));
    if (wide.size() == 1 && wide[0].first == 0x80 && wide[0].second == kMaxCodePoint) {
      alts.push_back(b_.utf8_char_nonascii());
    } else {
      std::vector<std::vector<std::pair<uint8_t, uint8_t>>> pieces;
      for (auto [lo, hi] : wide) utf8_split(lo, hi, pieces);
      for (const auto& piece : pieces) {
        std::vector<Id> seq;
        for (auto [blo, bhi] : piece) {
          ByteSet s;
          s.add_range(blo, bhi);
          seq.push_back(b_.char_class(s));
        }
        alts.push_back(b_.sequence(std::move(seq)));
      }
    }
    return b_.choice(std::move(alts));
  }

  static std::string json_escaped(uint32_t c) {
    switch (c) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\t': return "\\t";
      case '\r': return "\\r";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default: {
        static const char* kHex = "0123456789abcdef";
        return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
      }
    }
  }

  GrammarBuilder& b_;
  std::string_view p_;
  RegexOptions o_;
  size_t i_ = 0;
};

}  // namespace

GrammarBuilder::Id compile_regex_into(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options) {
  return RegexParser(b, pattern, options).parse();
}

GrammarBuilder::Id GrammarBuilder::regex(std::string_view pattern, std::string_view flags) {
  RegexOptions o;
  for (char f : flags) {
    if (f == 'i') {
      o.case_insensitive = true;
    } else if (f == 's') {
      o.dot_all = true;
    } else {
      fail("regex /{}/: unsupported flag '{}'", pattern, f);
    }
  }
  return compile_regex_into(*this, pattern, o);
}

std::shared_ptr<const Grammar> compile_regex(std::string_view pattern, std::string_view flags) {
  GrammarBuilder b;
  return b.build(b.regex(pattern, flags));
}

}  // namespace splash::grammar
