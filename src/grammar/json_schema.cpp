// JSON Schema -> grammar expressions (see json_schema.h for what is supported).
//
// Whitespace: between JSON tokens we allow nothing, one space, or a newline followed by up to
// 32 spaces/tabs (pretty-printing up to 16 levels at two spaces). Never more, so a small model
// cannot spin on whitespace forever. Numbers are likewise capped at 18 integer digits, 20
// fraction digits and 3 exponent digits; strings are not capped unless maxLength says so.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/error.h"
#include "grammar/builder_impl.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace splash::grammar {

using Id = GrammarBuilder::Id;

namespace {

constexpr int kMaxSchemaDepth = 128;
constexpr int kMaxDigits = 20;     // fraction digits
constexpr int kMaxIntDigits = 18;  // integer digits: every such integer fits int64
constexpr int kMaxWsIndent = 32;

Id json_ws(GrammarBuilder& b) {
  auto& impl = b.impl();
  if (impl.json_ws == -1) {
    impl.json_ws = b.optional(b.choice({b.literal(" "), b.sequence({b.literal("\n"), b.repeat(b.char_class(" \t"), 0, kMaxWsIndent)})}));
  }
  return impl.json_ws;
}

}  // namespace

void GrammarBuilder::single_line_json() {
  if (impl_->json_ws != -1) fail("single_line_json() must come before any JSON is built");
  impl_->json_ws = optional(literal(" "));
}

namespace {

Id hex(GrammarBuilder& b) { return b.char_class("0-9a-fA-F"); }

Id json_char(GrammarBuilder& b) {
  // \uXXXX must not be a lone surrogate (JSON parsers reject those): either a non-surrogate
  // or a high surrogate followed by an escaped low one.
  const Id h = hex(b);
  const Id unicode = b.choice({
      b.sequence({b.char_class("0-9a-cA-Ce-fE-F"), h, h, h}),
      b.sequence({b.char_class("dD"), b.char_class("0-7"), h, h}),
      b.sequence({b.char_class("dD"), b.char_class("89abAB"), h, h, b.literal("\\u"), b.char_class("dD"),
                  b.char_class("c-fC-F"), h, h}),
  });
  ByteSet plain;
  plain.add_range(0x20, 0x7F);
  plain.words['"' >> 6] &= ~(uint64_t{1} << ('"' & 63));
  plain.words['\\' >> 6] &= ~(uint64_t{1} << ('\\' & 63));
  return b.choice({b.char_class(plain), b.utf8_char_nonascii(),
                   b.sequence({b.literal("\\"), b.choice({b.char_class("\"\\\\/bfnrt"), b.sequence({b.literal("u"), unicode})})})});
}

Id digits(GrammarBuilder& b, int min, int max) { return b.repeat(b.char_class("0-9"), min, max); }

std::string pow10_minus1(size_t len) { return std::string(len, '9'); }

// Decimal strings of equal length in [lo, hi] (lo <= hi), leading zeros as given.
Id same_length_range(GrammarBuilder& b, const std::string& lo, const std::string& hi) {
  const size_t len = lo.size();
  if (len == 1) return b.char_class(std::string{lo[0], '-', hi[0]});
  if (lo[0] == hi[0]) return b.sequence({b.literal(lo.substr(0, 1)), same_length_range(b, lo.substr(1), hi.substr(1))});
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  const bool lo_zeros = lo_rest == std::string(len - 1, '0');
  const bool hi_nines = hi_rest == std::string(len - 1, '9');
  std::vector<Id> alts;
  if (!lo_zeros) {
    alts.push_back(b.sequence({b.literal(lo.substr(0, 1)), same_length_range(b, lo_rest, std::string(len - 1, '9'))}));
  }
  const char first = static_cast<char>(lo_zeros ? lo[0] : lo[0] + 1);
  const char last = static_cast<char>(hi_nines ? hi[0] : hi[0] - 1);
  if (first <= last) alts.push_back(b.sequence({b.char_class(std::string{first, '-', last}), digits(b, static_cast<int>(len - 1), static_cast<int>(len - 1))}));
  if (!hi_nines) {
    alts.push_back(b.sequence({b.literal(hi.substr(0, 1)), same_length_range(b, std::string(len - 1, '0'), hi_rest)}));
  }
  return b.choice(std::move(alts));
}

// Canonical decimals (no leading zeros) of the integers in [lo, hi], 0 <= lo; hi unset: no
// upper bound (up to kMaxDigits digits).
Id nonneg_range(GrammarBuilder& b, int64_t lo, std::optional<int64_t> hi) {
  const std::string los = std::to_string(lo);
  std::vector<Id> alts;
  if (!hi) {
    alts.push_back(nonneg_range(b, lo, std::stoll(pow10_minus1(los.size()))));
    if (static_cast<int>(los.size()) < kMaxIntDigits) {
      alts.push_back(b.sequence({b.char_class("1-9"), digits(b, static_cast<int>(los.size()), kMaxIntDigits - 1)}));
    }
    return b.choice(std::move(alts));
  }
  const std::string his = std::to_string(*hi);
  for (size_t len = los.size(); len <= his.size(); ++len) {
    std::string a = los;
    if (len != los.size()) {
      a.assign(len, '0');
      a[0] = '1';
    }
    const std::string z = len == his.size() ? his : pow10_minus1(len);
    alts.push_back(same_length_range(b, a, z));
  }
  return b.choice(std::move(alts));
}

Id integer_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Id> alts;
  if (!hi || *hi >= 0) alts.push_back(nonneg_range(b, lo ? std::max<int64_t>(*lo, 0) : 0, hi));
  if (!lo || *lo < 0) {
    const int64_t nlo = (hi && *hi < 0) ? -*hi : 1;
    std::optional<int64_t> nhi;
    if (lo) nhi = -*lo;
    alts.push_back(b.sequence({b.literal("-"), nonneg_range(b, nlo, nhi)}));
  }
  return b.choice(std::move(alts));
}

// A value usable as a bound: finite and well inside int64.
bool as_bound(double v, int64_t& out) {
  if (!std::isfinite(v) || std::fabs(v) > 9e17) return false;
  out = static_cast<int64_t>(v);
  return true;
}

template <class Json>
class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, const Json& root) : b_(b), root_(root) {}

  Id compile() {
    const Id top = schema(root_, "", 0);
    // $ref targets are compiled here, one after another, so reference chains never deepen
    // the C++ stack.
    while (!pending_.empty()) {
      const auto [ref, rule] = pending_.back();
      pending_.pop_back();
      const Json& target = resolve(ref);
      b_.define(rule, schema(target, ref.substr(1), 0));
    }
    return top;
  }

 private:
  static inline const std::set<std::string> kAnnotations = {
      "description", "title", "default", "examples", "$schema", "$id", "$comment", "strict", "nullable",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  static inline const std::set<std::string> kKeywords = {
      "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
      "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
      "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref"};

  static std::string where(const std::string& path) { return path.empty() ? "/" : path; }

  const Json& resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#') fail("unsupported $ref '{}' (only local references like #/$defs/name)", ref);
    try {
      return root_.at(typename Json::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      fail("unresolvable $ref '{}'", ref);
    }
  }

  Id ref_rule(const std::string& ref) {
    resolve(ref);
    auto [it, fresh] = refs_.try_emplace(ref, -1);
    if (fresh) {
      it->second = b_.rule(ref);
      pending_.emplace_back(ref, it->second);
    }
    return it->second;
  }

  static bool has_constraints(const Json& s, std::initializer_list<const char*> except) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kAnnotations.count(it.key())) continue;
      if (std::find_if(except.begin(), except.end(), [&](const char* e) { return it.key() == e; }) != except.end()) continue;
      return true;
    }
    return false;
  }

  // Shallow merge of a sub-schema into its parent's other keywords (anyOf/allOf branches,
  // $ref with siblings): required lists are united, properties merged, the rest overridden.
  static Json merged(const Json& base, const Json& over, std::initializer_list<const char*> drop) {
    Json out = base;
    for (const char* d : drop) out.erase(d);
    if (!over.is_object()) return out;
    for (auto it = over.begin(); it != over.end(); ++it) {
      if (it.key() == "required" && out.contains("required") && out["required"].is_array() && it.value().is_array()) {
        for (const auto& r : it.value()) out["required"].push_back(r);
      } else if (it.key() == "properties" && out.contains("properties") && out["properties"].is_object() &&
                 it.value().is_object()) {
        for (auto p = it.value().begin(); p != it.value().end(); ++p) out["properties"][p.key()] = p.value();
      } else {
        out[it.key()] = it.value();
      }
    }
    return out;
  }

  Id schema(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) fail("JSON Schema nested deeper than {} levels at {}", kMaxSchemaDepth, where(path));
    if (s.is_boolean()) {
      if (s.template get<bool>()) return b_.json_value();
      b_.impl().nothing_at.push_back(where(path));  // harmless unless a value must be there
      return b_.choice({});
    }
    if (!s.is_object()) fail("JSON Schema at {} must be an object or a boolean", where(path));
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kKeywords.count(it.key()) && !kAnnotations.count(it.key())) {
        fail("unsupported JSON Schema keyword '{}' at {}", it.key(), where(path));
      }
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail("$ref at {} must be a string", where(path));
      const std::string ref = s["$ref"].template get<std::string>();
      if (!has_constraints(s, {"$ref"})) return ref_rule(ref);
      Json siblings = s;
      siblings.erase("$ref");
      return schema(merged(resolve(ref), siblings, {}), path, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const auto& list = s[key];
      if (!list.is_array() || list.empty()) fail("{} at {} must be a non-empty array", key, where(path));
      const bool plain = !has_constraints(s, {key});
      std::vector<Id> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string sub = fmt::format("{}/{}/{}", path, key, i);
        alts.push_back(plain ? schema(list[i], sub, depth + 1) : schema(merged(s, list[i], {"anyOf", "oneOf"}), sub, depth + 1));
      }
      return b_.choice(std::move(alts));
    }
    if (s.contains("allOf")) {
      const auto& list = s["allOf"];
      if (!list.is_array() || list.size() != 1) {
        fail("allOf at {} is supported only with exactly one schema", where(path));
      }
      return schema(merged(s, list[0], {"allOf"}), path + "/allOf/0", depth + 1);
    }
    if (s.contains("const")) return values(s, {s["const"]}, path);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail("enum at {} must be a non-empty array", where(path));
      return values(s, std::vector<Json>(s["enum"].begin(), s["enum"].end()), path);
    }
    std::vector<std::string> types = types_of(s, path);
    if (types.empty()) return b_.json_value();
    std::vector<Id> alts;
    for (const auto& t : types) alts.push_back(typed(s, t, path, depth));
    return b_.choice(std::move(alts));
  }

  std::vector<std::string> types_of(const Json& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const auto& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.template get<std::string>());
      } else if (t.is_array()) {
        for (const auto& x : t) {
          if (!x.is_string()) fail("type at {} must be a string or an array of strings", where(path));
          types.push_back(x.template get<std::string>());
        }
      } else {
        fail("type at {} must be a string or an array of strings", where(path));
      }
      return types;
    }
    // No type: generate the type the other keywords talk about (a valid subset).
    auto any = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (any({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
    if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
    return types;
  }

  static bool value_has_type(const Json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.template get<double>()) == v.template get<double>());
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
  }

  Id values(const Json& s, const std::vector<Json>& vals, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) types = types_of(s, path);
    std::vector<Id> alts;
    for (const auto& v : vals) {
      if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) { return value_has_type(v, t); })) continue;
      alts.push_back(b_.literal(v.dump()));
    }
    if (alts.empty()) fail("no enum/const value at {} has the schema's type", where(path));
    return b_.choice(std::move(alts));
  }

  Id typed(const Json& s, const std::string& t, const std::string& path, int depth) {
    if (t == "null") return b_.literal("null");
    if (t == "boolean") return b_.choice({b_.literal("true"), b_.literal("false")});
    if (t == "string") return string_schema(s, path);
    if (t == "integer") return number_schema(s, path, true);
    if (t == "number") return number_schema(s, path, false);
    if (t == "object") return object_schema(s, path, depth);
    if (t == "array") return array_schema(s, path, depth);
    fail("unsupported type '{}' at {}", t, where(path));
  }

  int count_keyword(const Json& s, const char* key, const std::string& path, int fallback) {
    if (!s.contains(key)) return fallback;
    const auto& v = s[key];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.template get<double>()) == v.template get<double>())) {
      fail("{} at {} must be a non-negative integer", key, where(path));
    }
    const double d = v.template get<double>();
    if (d < 0) fail("{} at {} must be a non-negative integer", key, where(path));
    if (d > 100000) fail("schema too large: {} = {} at {}", key, d, where(path));
    return static_cast<int>(d);
  }

  Id string_schema(const Json& s, const std::string& path) {
    const Id quote = b_.literal("\"");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::optional<std::string> pattern;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail("pattern at {} must be a string", where(path));
      pattern = s["pattern"].template get<std::string>();
    } else if (s.contains("format")) {
      pattern = format_regex(s["format"].is_string() ? s["format"].template get<std::string>() : "");
    }
    if (pattern) {
      if (lengths) fail("pattern/format combined with minLength/maxLength at {} is unsupported", where(path));
      RegexOptions o;
      o.json_escape = true;
      Id inner;
      try {
        inner = compile_regex_into(b_, *pattern, o);
      } catch (const Error& e) {
        fail("{} (pattern at {})", e.what(), where(path));
      }
      return b_.sequence({quote, inner, quote});
    }
    const int min = count_keyword(s, "minLength", path, 0);
    const int max = count_keyword(s, "maxLength", path, -1);
    if (max != -1 && max < min) fail("maxLength < minLength at {}", where(path));
    return b_.sequence({quote, b_.repeat(char_rule(), min, max), quote});
  }

  Id char_rule() {
    if (char_ == -1) char_ = json_char(b_);
    return char_;
  }

  static std::optional<std::string> format_regex(const std::string& f) {
    static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
    static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
    static const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
    if (f == "date") return date;
    if (f == "time") return time;
    if (f == "date-time") return date + "T" + time;
    if (f == "uuid") return R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})";
    if (f == "email") return R"([A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(\.[A-Za-z0-9\-]{1,63}){0,8}\.[A-Za-z]{2,24})";
    if (f == "ipv4") return octet + "\\." + octet + "\\." + octet + "\\." + octet;
    if (f == "uri") return R"([A-Za-z][A-Za-z0-9+.\-]{0,31}:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]{1,2048})";
    return std::nullopt;  // other formats are annotations
  }

  // Reads a numeric bound; exclusive: the 2019+ number form or the draft-4 boolean form.
  std::optional<double> bound(const Json& s, const char* key, const char* exclusive_key, bool& exclusive,
                              const std::string& path) {
    std::optional<double> v;
    exclusive = false;
    if (s.contains(key)) {
      if (!s[key].is_number()) fail("{} at {} must be a number", key, where(path));
      v = s[key].template get<double>();
    }
    if (s.contains(exclusive_key)) {
      const auto& e = s[exclusive_key];
      if (e.is_boolean()) {
        exclusive = e.template get<bool>() && v.has_value();
      } else if (e.is_number()) {
        const double x = e.template get<double>();
        const bool lower = std::string(key) == "minimum";
        if (!v || (lower ? x >= *v : x <= *v)) {
          v = x;
          exclusive = true;
        }
      } else {
        fail("{} at {} must be a number", exclusive_key, where(path));
      }
    }
    return v;
  }

  Id number_schema(const Json& s, const std::string& path, bool integer) {
    bool lo_ex = false, hi_ex = false;
    const auto lo_v = bound(s, "minimum", "exclusiveMinimum", lo_ex, path);
    const auto hi_v = bound(s, "maximum", "exclusiveMaximum", hi_ex, path);
    if (!lo_v && !hi_v) {
      const Id int_part = integer_range(b_, std::nullopt, std::nullopt);
      if (integer) return int_part;
      return b_.sequence({int_part, b_.optional(b_.sequence({b_.literal("."), digits(b_, 1, kMaxDigits)})),
                          b_.optional(b_.sequence({b_.char_class("eE"), b_.optional(b_.char_class("+-")), digits(b_, 1, 2)}))});
    }
    std::optional<int64_t> lo, hi;  // integer-valued bounds as written
    auto take = [&](const std::optional<double>& v, const char* name, std::optional<int64_t>& out) {
      if (!v) return;
      int64_t i;
      if (!as_bound(std::floor(*v), i)) fail("{} at {} is out of the supported range", name, where(path));
      if (!integer && std::floor(*v) != *v) {
        fail("fractional bound '{}' ({}) at {} is unsupported for type number", name, *v, where(path));
      }
      out = i;
    };
    take(lo_v, lo_ex ? "exclusiveMinimum" : "minimum", lo);
    take(hi_v, hi_ex ? "exclusiveMaximum" : "maximum", hi);
    // Integer values in range: for integers, round the bounds inwards.
    std::optional<int64_t> ilo = lo, ihi = hi;
    if (lo_v) ilo = (integer && std::floor(*lo_v) != *lo_v) ? *lo + 1 : (lo_ex ? *lo + 1 : *lo);
    if (hi_v) ihi = hi_ex && std::floor(*hi_v) == *hi_v ? *hi - 1 : *hi;
    std::vector<Id> alts;
    if (!ilo || !ihi || *ilo <= *ihi) alts.push_back(integer_range(b_, ilo, ihi));
    if (!integer) {
      // Non-integers with integer bounds L, U: x = n + f (0 < f < 1) lies strictly inside
      // (L, U) iff max(L, 0) <= n <= U - 1; x = -(n + f) iff max(0, -U) <= n <= -L - 1.
      // Fractions are written with a non-zero digit so that they really are non-integers.
      const Id frac = b_.sequence({b_.literal("."), digits(b_, 0, kMaxDigits - 1), b_.char_class("1-9"), digits(b_, 0, kMaxDigits - 1)});
      const int64_t plo = lo ? std::max<int64_t>(*lo, 0) : 0;
      if (!hi || *hi - 1 >= plo) {
        alts.push_back(b_.sequence({nonneg_range(b_, plo, hi ? std::optional<int64_t>(*hi - 1) : std::nullopt), frac}));
      }
      const int64_t nlo = hi ? std::max<int64_t>(0, -*hi) : 0;
      if (!lo || -*lo - 1 >= nlo) {
        alts.push_back(b_.sequence({b_.literal("-"), nonneg_range(b_, nlo, lo ? std::optional<int64_t>(-*lo - 1) : std::nullopt), frac}));
      }
    }
    if (alts.empty()) fail("no number satisfies the bounds at {}", where(path));
    return b_.choice(std::move(alts));
  }

  Id sep() { return b_.sequence({json_ws(b_), b_.literal(","), json_ws(b_)}); }

  // Key content (inside the quotes, no escapes) that is none of `names`: walk the names' trie;
  // at each node either stop (unless a name ends there), follow a child, or leave the trie
  // with a byte no name continues with. Non-ASCII names' branches are not followed (a subset).
  Id key_not_in(const std::vector<std::string>& names) {
    ByteSet key_ascii;
    key_ascii.add_range(0x20, 0x7E);
    key_ascii.words['"' >> 6] &= ~(uint64_t{1} << ('"' & 63));
    key_ascii.words['\\' >> 6] &= ~(uint64_t{1} << ('\\' & 63));
    const Id any_rest = b_.repeat(b_.choice({b_.char_class(key_ascii), b_.utf8_char_nonascii()}), 0, -1);
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    return not_in(sorted, 0, sorted.size(), 0, key_ascii, any_rest, 0);
  }

  Id not_in(const std::vector<std::string>& words, size_t begin, size_t end, size_t depth, const ByteSet& key_ascii,
            Id any_rest, int level) {
    if (level > 4096) fail("schema too large: property names too long");
    std::vector<Id> alts;
    size_t i = begin;
    if (i < end && words[i].size() == depth) {
      ++i;  // a name ends here: stopping is not allowed
    } else {
      alts.push_back(b_.literal(""));
    }
    ByteSet leave = key_ascii;
    bool wide_child = false;
    while (i < end) {
      const auto c = static_cast<uint8_t>(words[i][depth]);
      size_t j = i;
      while (j < end && static_cast<uint8_t>(words[j][depth]) == c) ++j;
      if (c >= 0x80) {
        wide_child = true;
      } else if (key_ascii.has(c)) {
        leave.words[c >> 6] &= ~(uint64_t{1} << (c & 63));
        alts.push_back(b_.sequence({b_.literal(std::string(1, static_cast<char>(c))),
                                    not_in(words, i, j, depth + 1, key_ascii, any_rest, level + 1)}));
      }
      i = j;
    }
    if (!leave.empty()) alts.push_back(b_.sequence({b_.char_class(leave), any_rest}));
    if (!wide_child) alts.push_back(b_.sequence({b_.utf8_char_nonascii(), any_rest}));
    return b_.choice(std::move(alts));
  }

  Id object_schema(const Json& s, const std::string& path, int depth) {
    struct Prop {
      std::string name;
      Id value;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("required at {} must be an array of strings", where(path));
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail("required at {} must be an array of strings", where(path));
        required.insert(r.template get<std::string>());
      }
    }
    std::optional<Id> extra;  // the schema of additional properties, if they are allowed
    const Json* additional = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (!additional || (additional->is_boolean() && additional->template get<bool>())) {
      extra = b_.json_value();
    } else if (!additional->is_boolean()) {
      extra = schema(*additional, path + "/additionalProperties", depth + 1);
    }
    std::set<std::string> declared;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail("properties at {} must be an object", where(path));
      const auto& ps = s["properties"];
      for (auto it = ps.begin(); it != ps.end(); ++it) {
        props.push_back({it.key(), schema(it.value(), path + "/properties/" + it.key(), depth + 1), required.count(it.key()) > 0});
        declared.insert(it.key());
      }
    }
    // Required names with no property schema: any value (or additionalProperties' schema).
    for (const auto& r : s.contains("required") ? s["required"] : Json::array()) {
      const std::string name = r.template get<std::string>();
      if (declared.count(name)) continue;
      if (!extra) fail("required property '{}' at {} is forbidden by additionalProperties: false", name, where(path));
      props.push_back({name, *extra, true});
      declared.insert(name);
    }
    const Id ws = json_ws(b_);
    const Id colon = b_.sequence({ws, b_.literal(":"), ws});
    auto member = [&](const Prop& p) { return b_.sequence({b_.literal(Json(p.name).dump()), colon, p.value}); };
    // After the declared members: extras, each with a leading separator.
    Id rest = b_.literal("");
    Id first = b_.choice({});  // a non-empty member list starting with an extra
    if (extra) {
      const Id extra_member = b_.sequence({b_.literal("\""), key_not_in({declared.begin(), declared.end()}), b_.literal("\""), colon, *extra});
      rest = b_.repeat(b_.sequence({sep(), extra_member}), 0, -1);
      first = b_.sequence({extra_member, rest});
    }
    // S_i: members i.. after something was written; F_i: non-empty members i.. when nothing was.
    for (size_t k = props.size(); k-- > 0;) {
      const Id m = member(props[k]);
      const Id with = b_.sequence({sep(), m, rest});
      const Id first_with = b_.sequence({m, rest});
      if (props[k].required) {
        rest = with;
        first = first_with;
      } else {
        const Id rest_rule = b_.rule("");
        b_.define(rest_rule, b_.choice({with, rest}));
        const Id first_rule = b_.rule("");
        b_.define(first_rule, b_.choice({first_with, first}));
        rest = rest_rule;
        first = first_rule;
      }
    }
    const bool any_required = std::any_of(props.begin(), props.end(), [](const Prop& p) { return p.required; });
    const Id body = any_required ? b_.sequence({first, ws}) : b_.optional(b_.sequence({first, ws}));
    return b_.sequence({b_.literal("{"), ws, body, b_.literal("}")});
  }

  Id array_schema(const Json& s, const std::string& path, int depth) {
    std::vector<Id> prefix;
    const Json* items = s.contains("items") ? &s["items"] : nullptr;
    std::optional<Id> rest_item;
    const Json* prefix_items = s.contains("prefixItems") ? &s["prefixItems"] : nullptr;
    if (items && items->is_array()) {  // draft-4 tuple form
      if (prefix_items) fail("both prefixItems and array-valued items at {}", where(path));
      prefix_items = items;
      items = nullptr;
    }
    if (prefix_items) {
      if (!prefix_items->is_array()) fail("prefixItems at {} must be an array", where(path));
      for (size_t i = 0; i < prefix_items->size(); ++i) {
        prefix.push_back(schema((*prefix_items)[i], fmt::format("{}/prefixItems/{}", path, i), depth + 1));
      }
    }
    if (!items || (items->is_boolean() && items->template get<bool>())) {
      rest_item = b_.json_value();
    } else if (!items->is_boolean()) {
      rest_item = schema(*items, path + "/items", depth + 1);
    }
    const int min = count_keyword(s, "minItems", path, 0);
    const int max = count_keyword(s, "maxItems", path, -1);
    if (max != -1 && max < min) fail("maxItems < minItems at {}", where(path));
    const int p = static_cast<int>(prefix.size());
    if (!rest_item && min > p) fail("minItems at {} needs more items than prefixItems allows", where(path));
    // tail(i): the separator-led items after i items were written.
    auto tail_from_prefix_end = [&](int i) -> Id {
      if (!rest_item) return b_.literal("");
      const int more_min = std::max(0, min - i);
      const int more_max = max == -1 ? -1 : std::max(0, max - i);
      return b_.repeat(b_.sequence({sep(), *rest_item}), more_min, more_max);
    };
    Id tail = tail_from_prefix_end(std::max(p, 1));
    for (int i = p - 1; i >= 1; --i) {
      if (max != -1 && i >= max) {
        tail = b_.literal("");
        continue;
      }
      const Id more = b_.sequence({sep(), prefix[static_cast<size_t>(i)], tail});
      tail = i >= min ? b_.choice({b_.literal(""), more}) : more;
    }
    const Id open = b_.literal("["), close = b_.literal("]"), ws = json_ws(b_);
    if (max == 0) return b_.sequence({open, ws, close});
    Id elements;
    if (p >= 1) {
      elements = b_.sequence({prefix[0], tail});
    } else {
      elements = b_.sequence({*rest_item, tail});
    }
    const Id body = min == 0 ? b_.optional(b_.sequence({elements, ws})) : b_.sequence({elements, ws});
    return b_.sequence({open, ws, body, close});
  }

  GrammarBuilder& b_;
  const Json& root_;
  std::map<std::string, Id> refs_;
  std::vector<std::pair<std::string, Id>> pending_;
  Id char_ = -1;
};

}  // namespace

Id GrammarBuilder::json_string() {
  auto& impl = *impl_;
  if (impl.json_string == -1) {
    impl.json_string = sequence({literal("\""), repeat(json_char(*this), 0, -1), literal("\"")});
  }
  return impl.json_string;
}

Id GrammarBuilder::json_value() {
  auto& impl = *impl_;
  if (impl.json_value != -1) return impl.json_value;
  const Id value = rule("json_value");
  impl.json_value = value;
  const Id ws = json_ws(*this);
  const Id comma = sequence({ws, literal(","), ws});
  const Id member = sequence({json_string(), ws, literal(":"), ws, value});
  impl.json_object = sequence({literal("{"), ws, optional(sequence({member, repeat(sequence({comma, member}), 0, -1), ws})), literal("}")});
  const Id array = sequence({literal("["), ws, optional(sequence({value, repeat(sequence({comma, value}), 0, -1), ws})), literal("]")});
  const Id number = sequence({integer_range(*this, std::nullopt, std::nullopt),
                              optional(sequence({literal("."), digits(*this, 1, kMaxDigits)})),
                              optional(sequence({char_class("eE"), optional(char_class("+-")), digits(*this, 1, 2)}))});
  define(value, choice({impl.json_object, array, json_string(), number, literal("true"), literal("false"), literal("null")}));
  return value;
}

Id GrammarBuilder::json_object() {
  json_value();
  return impl_->json_object;
}

Id GrammarBuilder::json_schema(const nlohmann::json& schema) { return SchemaCompiler<nlohmann::json>(*this, schema).compile(); }
Id GrammarBuilder::json_schema(const nlohmann::ordered_json& schema) {
  return SchemaCompiler<nlohmann::ordered_json>(*this, schema).compile();
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema) {
  GrammarBuilder b;
  return b.build(b.json_schema(schema));
}
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema) {
  GrammarBuilder b;
  return b.build(b.json_schema(schema));
}

}  // namespace splash::grammar
