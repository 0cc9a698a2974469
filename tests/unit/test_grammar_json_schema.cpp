// JSON Schema -> grammar: known-valid / known-invalid documents per construct, random walks
// whose every output must parse and validate (with a small validator written here, separate
// from the compiler), and hostile schemas.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/grammar_builder.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "test_grammar_util.h"

namespace {

using nlohmann::json;
using splash::Error;
using namespace splash::grammar;

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.is_complete();
}

// ---- An independent validator for the subset (no code shared with json_schema.cpp). ----

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool validate(const json& v, const json& s, const json& root, int depth = 0);

bool type_ok(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

bool format_ok(const std::string& f, const std::string& s) {
  static const std::map<std::string, std::regex> kFormats = {
      {"date", std::regex(R"(\d{4}-\d{2}-\d{2})")},
      {"time", std::regex(R"(\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2}))")},
      {"date-time", std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2}))")},
      {"uuid", std::regex(R"([0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})")},
      {"email", std::regex(R"([^@\s]+@[^@\s]+\.[A-Za-z]+)")},
      {"ipv4", std::regex(R"((\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}))")},
  };
  auto it = kFormats.find(f);
  if (it == kFormats.end()) return true;
  std::smatch m;
  if (!std::regex_match(s, m, it->second)) return false;
  if (f == "ipv4") {
    for (int i = 1; i <= 4; ++i) {
      if (std::stoi(m[i].str()) > 255) return false;
    }
  }
  return true;
}

bool validate(const json& v, const json& s, const json& root, int depth) {
  if (depth > 200) return false;
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return validate(v, root.at(json::json_pointer(ref.substr(1))), root, depth + 1);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) {
    const auto& list = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
    bool any = false;
    for (const auto& sub : list) any = any || validate(v, sub, root, depth + 1);
    if (!any) return false;
  }
  if (s.contains("allOf")) {
    for (const auto& sub : s["allOf"]) {
      if (!validate(v, sub, root, depth + 1)) return false;
    }
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) {
      ok = type_ok(v, s["type"]);
    } else {
      for (const auto& t : s["type"]) ok = ok || type_ok(v, t);
    }
    if (!ok) return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found = found || e == v;
    if (!found) return false;
  }
  if (v.is_string()) {
    const std::string str = v;
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) return false;
    if (s.contains("format") && !format_ok(s["format"], str)) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_object()) {
    if (s.contains("required")) {
      for (const auto& r : s["required"]) {
        if (!v.contains(r.get<std::string>())) return false;
      }
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (s.contains("properties") && s["properties"].contains(it.key())) {
        if (!validate(it.value(), s["properties"][it.key()], root, depth + 1)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!validate(it.value(), s["additionalProperties"], root, depth + 1)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    size_t prefix = 0;
    if (s.contains("prefixItems")) {
      prefix = s["prefixItems"].size();
      for (size_t i = 0; i < v.size() && i < prefix; ++i) {
        if (!validate(v[i], s["prefixItems"][i], root, depth + 1)) return false;
      }
    }
    if (s.contains("items")) {
      for (size_t i = prefix; i < v.size(); ++i) {
        if (!validate(v[i], s["items"], root, depth + 1)) return false;
      }
    }
  }
  return true;
}

// ---- Schemas under test, with hand-written valid and invalid documents. ----

struct Case {
  const char* name;
  const char* schema;
  std::vector<std::string> valid, invalid;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {"any", R"({})", {R"({"a": [1, 2.5e3, "x\n\"", null, true]})", "0", "-12.5", R"("\ud83d\ude00")"},
       {"01", "[1,]", "{\"a\" 1}", "tru", "\"\\ud800\"", "\"a\tb\"", "1."}},
      {"string", R"({"type":"string"})", {R"("")", R"("h\u00e9 \\ \/ ok")", "\"\xc3\xa9\xe2\x82\xac\""}, {"1", R"("\x")", "\"\xc3\"", "\"\xed\xa0\x80\""}},
      {"string_len", R"({"type":"string","minLength":2,"maxLength":4})", {R"("ab")", R"("abcd")", R"("\n\"")", "\"\xc3\xa9\xc3\xa9\""}, {R"("a")", R"("abcde")"}},
      {"integer", R"({"type":"integer"})", {"0", "-7", "123456789012345678"}, {"1.5", "01", "-0", "+1", "\"1\""}},
      {"int_range", R"({"type":"integer","minimum":-15,"maximum":213})", {"-15", "-9", "0", "99", "199", "213"}, {"-16", "214", "300", "-100", "1000"}},
      {"int_exclusive", R"({"type":"integer","exclusiveMinimum":10,"exclusiveMaximum":100})", {"11", "50", "99"}, {"10", "100", "9"}},
      {"int_min_only", R"({"type":"integer","minimum":1000})", {"1000", "9999", "10000", "12345678"}, {"999", "0", "-1000"}},
      {"int_max_only", R"({"type":"integer","maximum":-5})", {"-5", "-6", "-1000000"}, {"-4", "0", "5"}},
      {"number", R"({"type":"number"})", {"0", "-1.25", "3e10", "2.5E-3"}, {".5", "1.", "--1", "1e"}},
      {"number_range", R"({"type":"number","minimum":-2,"maximum":3})", {"-2", "-1.5", "0.25", "2.999", "3"}, {"3.5", "-2.01", "4", "-3"}},
      {"boolean_null", R"({"type":["boolean","null"]})", {"true", "false", "null"}, {"0", "\"true\""}},
      {"enum", R"({"enum":["red","green",3,null,{"a":1}]})", {R"("red")", R"("green")", "3", "null", R"({"a":1})"}, {R"("blue")", "4", R"("re")"}},
      {"const", R"({"const":"fixed"})", {R"("fixed")"}, {R"("fixe")", R"("fixed2")"}},
      {"object_strict",
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"],"additionalProperties":false})",
       {R"({"name":"x"})", R"({"name": "x", "age": 3})", R"({"name":"x","tags":["a","b"]})",
        "{\n  \"name\": \"z\",\n  \"age\": 1\n}"},
       {R"({})", R"({"age":3})", R"({"name":"x","other":1})", R"({"name":"x","age":-1})", R"({"name":"x","name":"y"})",
        R"({"age":0,"name":"y"})"}},  // valid JSON Schema-wise, but members come in declared order
      {"object_extra", R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
       {R"({})", R"({"a":1})", R"({"a":1,"b":true})", R"({"zz":false})"}, {R"({"b":1})", R"({"a":true})", R"({"b":true,"a":1})"}},
      {"object_open", R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]})",
       {R"({"id":1})", R"({"id":1,"x":[1,{}]})"}, {R"({"x":1})", R"({"id":"1"})"}},
      {"array_bounds", R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1, 2, 3]", "[ 1,2 ]"}, {"[]", "[1,2,3,4]", "[\"a\"]"}},
      {"tuple", R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":2})",
       {R"(["a",1])"}, {R"(["a"])", R"([1,"a"])", R"(["a",1,2])"}},
      {"anyof", R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":5,"maximum":6}]})",
       {R"("ab")", "5", "6"}, {R"("abc")", "4", "null"}},
      {"oneof_null", R"({"oneOf":[{"type":"object","properties":{"k":{"const":1}},"required":["k"],"additionalProperties":false},{"type":"null"}]})",
       {R"({"k":1})", "null"}, {R"({"k":2})", "{}"}},
      {"allof1", R"({"allOf":[{"type":"string","minLength":1}]})", {R"("x")"}, {R"("")", "1"}},
      {"pattern", R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})", {R"("AB-123")"}, {R"("A-123")", R"("AB-12")", R"("ab-123")"}},
      {"pattern_quote", R"({"type":"string","pattern":"a\"b|c\\\\d"})", {R"("a\"b")", R"("c\\d")"}, {R"("a"b")"}},
      {"formats", R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"date-time"},"u":{"type":"string","format":"uuid"},"e":{"type":"string","format":"email"},"ip":{"type":"string","format":"ipv4"},"uri":{"type":"string","format":"uri"}},"required":["d","t","u","e","ip","uri"],"additionalProperties":false})",
       {R"({"d":"2024-02-29","t":"2024-01-01T12:30:00Z","u":"123e4567-e89b-12d3-a456-426614174000","e":"a.b@example.com","ip":"192.168.0.1","uri":"https://x.org/a?b=c"})"},
       {R"({"d":"2024-13-01","t":"2024-01-01T12:30:00Z","u":"123e4567-e89b-12d3-a456-426614174000","e":"a.b@example.com","ip":"192.168.0.1","uri":"https://x.org"})",
        R"({"d":"2024-01-01","t":"2024-01-01T12:30:00Z","u":"123e4567-e89b-12d3-a456-426614174000","e":"a.b@example.com","ip":"256.1.1.1","uri":"https://x.org"})"}},
      {"defs_ref", R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}},"type":"array","items":{"$ref":"#/$defs/pt"},"maxItems":3})",
       {R"([{"x":1,"y":2}])", "[]"}, {R"([{"x":1}])"}},
      {"tree", R"({"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#"},"maxItems":3}},"required":["value"],"additionalProperties":false})",
       {R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4}]}]})"}, {R"({"value":1,"children":[{}]})"}},
      {"definitions_ref", R"({"definitions":{"s":{"type":"string","maxLength":3}},"properties":{"a":{"$ref":"#/definitions/s"}},"additionalProperties":false})",
       {R"({"a":"abc"})", "{}"}, {R"({"a":"abcd"})"}},
      {"annotations", R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"T","description":"d","type":"boolean","default":true,"examples":[true],"$comment":"c","nullable":false})",
       {"true"}, {"1"}},
      {"true_schema", "true", {"1", "{}"}, {}},
  };
  return kCases;
}

TEST(JsonSchema, KnownValidAndInvalidDocuments) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto schema = nlohmann::ordered_json::parse(c.schema);
    const auto g = compile_json_schema(schema);
    for (const auto& v : c.valid) {
      EXPECT_TRUE(matches(g, v)) << c.name << " should accept: " << v;
      EXPECT_TRUE(validate(json::parse(v), json::parse(c.schema), json::parse(c.schema))) << "test bug: " << v;
    }
    for (const auto& v : c.invalid) EXPECT_FALSE(matches(g, v)) << c.name << " should reject: " << v;
  }
}

TEST(JsonSchema, RandomWalksProduceValidDocuments) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const json schema = json::parse(c.schema);
    const auto g = compile_json_schema(nlohmann::ordered_json::parse(c.schema));
    int complete = 0;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      const auto walk = splash::grammar::testing::random_byte_walk(g, seed * 7919 + 1, 600);
      if (!walk.complete) continue;
      ++complete;
      json doc;
      try {
        doc = json::parse(walk.text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.name << " seed " << seed << ": not JSON: " << walk.text << " (" << e.what() << ")";
        continue;
      }
      EXPECT_TRUE(validate(doc, schema, schema)) << c.name << " seed " << seed << ": invalid: " << walk.text;
    }
    EXPECT_GE(complete, 100) << c.name << ": too few walks finished";
  }
}

TEST(JsonSchema, RandomTokenWalksOverJsonishVocab) {
  // Token by token over multi-byte pieces, as a model would; masks checked exactly each step.
  std::vector<std::string> vocab;
  for (int b = 0x20; b < 0x7f; ++b) vocab.emplace_back(1, static_cast<char>(b));
  for (const char* s : {"{\"", "\":", "\": ", "\", \"", "\"}", "},", "}]", "[{", "true", "false", "null", "12", "3.5",
                        "-1", "\\n", "\\\"", "\\u00e9", "\n  ", "\"name\"", "\"age\": ", "\"tags\": [\"", "\xc3\xa9",
                        "\"x\"", "\"y\"", "\"value\": ", "\"children\": [", ", ", "\"}]}", "0", "99"}) {
    vocab.emplace_back(s);
  }
  const TokenTrie trie(vocab);
  for (const char* name : {"object_strict", "tree", "object_extra", "tuple", "int_range"}) {
    const auto& c = *std::find_if(cases().begin(), cases().end(), [&](const Case& x) { return std::string(x.name) == name; });
    const json schema = json::parse(c.schema);
    const auto g = compile_json_schema(nlohmann::ordered_json::parse(c.schema));
    int complete = 0;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      std::mt19937_64 rng(seed);
      Matcher m(g);
      std::string text;
      std::vector<uint8_t> mask;
      for (int step = 0; step < 200; ++step) {
        if (m.is_complete() && (m.is_dead() || rng() % 2 == 0)) break;
        if (seed < 10) splash::grammar::testing::expect_mask_exact(m, trie, vocab, std::string(name) + " " + text);
        m.fill_mask(trie, mask);
        std::vector<size_t> ok, multi;
        for (size_t i = 0; i < mask.size(); ++i) {
          if (!mask[i]) continue;
          ok.push_back(i);
          if (vocab[i].size() > 1 || vocab[i] == "\"" || vocab[i] == "}" || vocab[i] == "]") multi.push_back(i);
        }
        if (ok.empty()) break;
        const auto& pool = (!multi.empty() && rng() % 3 != 0) ? multi : ok;
        const auto& tok = vocab[pool[rng() % pool.size()]];
        ASSERT_TRUE(m.accept(tok));
        text += tok;
      }
      if (!m.is_complete()) continue;
      ++complete;
      json doc;
      try {
        doc = json::parse(text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": not JSON: " << text;
        continue;
      }
      EXPECT_TRUE(validate(doc, schema, schema)) << name << ": invalid: " << text;
    }
    EXPECT_GE(complete, 50) << name;
  }
}

TEST(JsonSchema, DeclaredOrderWithOrderedJson) {
  const auto g = compile_json_schema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},"required":["zeta","alpha"],"additionalProperties":false})"));
  EXPECT_TRUE(matches(g, R"({"zeta":1,"alpha":2})"));
  EXPECT_FALSE(matches(g, R"({"alpha":2,"zeta":1})"));
  Matcher m(g);
  EXPECT_EQ(m.forced_bytes(), "{");
  ASSERT_TRUE(m.accept("{"));
  ASSERT_TRUE(m.accept("\""));
  EXPECT_EQ(m.forced_bytes(), "zeta\"");
}

TEST(JsonSchema, UnsupportedKeywordIsNamedWithPath) {
  try {
    compile_json_schema(json::parse(R"({"type":"object","properties":{"a":{"type":"string","contentEncoding":"base64"}}})"));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'contentEncoding'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/properties/a"), std::string::npos) << e.what();
  }
  for (const char* bad : {R"({"patternProperties":{}})", R"({"type":"array","uniqueItems":true})", R"({"not":{}})",
                          R"({"type":"number","minimum":0.5})", R"X({"type":"string","pattern":"(?=x)"})X",
                          R"({"$ref":"#/$defs/missing"})", R"({"$ref":"http://x/y"})", R"({"type":"bogus"})",
                          R"({"allOf":[{},{}]})", R"({"type":"integer","minimum":5,"maximum":4})"}) {
    EXPECT_THROW(compile_json_schema(json::parse(bad)), Error) << bad;
  }
  try {
    compile_json_schema(json::parse(R"({"type":"number","exclusiveMaximum":2.5})"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exclusiveMaximum"), std::string::npos) << e.what();
  }
  // Fractional bounds are fine for integers (rounded inwards).
  const auto g = compile_json_schema(json::parse(R"({"type":"integer","minimum":0.5,"maximum":2.5})"));
  EXPECT_TRUE(matches(g, "1"));
  EXPECT_TRUE(matches(g, "2"));
  EXPECT_FALSE(matches(g, "0"));
  EXPECT_FALSE(matches(g, "3"));
}

// A schema no value satisfies is refused (the request gets a 400), naming where `false`
// stands where a value is required; `false` where a value may be left out only excludes it.
TEST(JsonSchema, ASchemaNothingSatisfiesIsRefusedNamingThePlace) {
  const auto refused = [](const char* schema) -> std::string {
    try {
      compile_json_schema(json::parse(schema));
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(refused("false").find("no output can satisfy"), std::string::npos) << refused("false");
  const std::string required = refused(R"({"type":"object","properties":{"a":false},"required":["a"]})");
  EXPECT_NE(required.find("/properties/a"), std::string::npos) << required;
  EXPECT_NE(refused(R"({"type":"array","prefixItems":[false]})").find("accepted"), std::string::npos);  // [] is fine
  EXPECT_NE(refused(R"({"anyOf":[false,false]})").find("no output can satisfy"), std::string::npos);
  const auto optional = compile_json_schema(json::parse(R"({"type":"object","properties":{"a":false,"b":{"type":"integer"}}})"));
  EXPECT_TRUE(matches(optional, R"({"b":1})"));
  EXPECT_FALSE(matches(optional, R"({"a":1})"));
  const auto one_of = compile_json_schema(json::parse(R"({"anyOf":[false,{"type":"integer"}]})"));
  EXPECT_TRUE(matches(one_of, "7"));
}

TEST(JsonSchema, HostileDeepNestingFailsCleanly) {
  json s;
  json* cur = &s;
  for (int i = 0; i < 10000; ++i) {
    (*cur)["type"] = "array";
    cur = &(*cur)["items"];
  }
  (*cur)["type"] = "integer";
  try {
    compile_json_schema(s);
    FAIL() << "10000-deep schema accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deeper"), std::string::npos) << e.what();
  }
  // 100 levels are fine, and the matcher handles the deep document.
  json ok = {{"type", "integer"}};
  for (int i = 0; i < 100; ++i) ok = json{{"type", "array"}, {"items", std::move(ok)}, {"minItems", 1}, {"maxItems", 1}};
  const auto g = compile_json_schema(ok);
  EXPECT_TRUE(matches(g, std::string(100, '[') + "7" + std::string(100, ']')));
  EXPECT_FALSE(matches(g, std::string(99, '[') + "7" + std::string(99, ']')));
}

TEST(JsonSchema, HugeEnumCompilesFastAndMatches) {
  json values = json::array();
  for (int i = 0; i < 100000; ++i) values.push_back(fmt::format("value_{}_x", i * 7 % 100000));
  const auto t0 = std::chrono::steady_clock::now();
  const auto g = compile_json_schema(json{{"enum", values}});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing ] enum of 100k strings: compiled in %.1f ms, %zu grammar elements\n", ms, g->code.size());
  EXPECT_TRUE(matches(g, R"("value_99999_x")"));
  EXPECT_TRUE(matches(g, R"("value_0_x")"));
  EXPECT_FALSE(matches(g, R"("value_100000_x")"));
  EXPECT_FALSE(matches(g, R"("value_1")"));
  Matcher m(g);
  ASSERT_TRUE(m.accept("\"value_1"));
  EXPECT_FALSE(m.overflowed());
}

TEST(JsonSchema, TooLargeSchemaIsRefused) {
  json props = json::object();
  std::string big(2000, 'k');
  for (int i = 0; i < 3000; ++i) props[big + std::to_string(i)] = {{"type", "string"}, {"minLength", 1000}};
  try {
    compile_json_schema(json{{"type", "object"}, {"properties", props}});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("schema too large"), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, RecursiveRefToRoot) {
  const json s = json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["name","next"],"additionalProperties":false})");
  const auto g = compile_json_schema(s);
  std::string doc = R"({"name":"leaf","next":null})";
  for (int i = 0; i < 200; ++i) doc = fmt::format(R"({{"name":"n","next":{}}})", doc);
  EXPECT_TRUE(matches(g, doc));
  EXPECT_FALSE(matches(g, R"({"name":"a","next":{"name":"b"}})"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const auto g = compile_json_schema(json::parse(R"({"type":"array","items":{"type":"integer"}})"));
  EXPECT_TRUE(matches(g, "[1, 2]"));
  EXPECT_TRUE(matches(g, "[\n  1,\n  2\n]"));
  EXPECT_FALSE(Matcher(g).can_accept("[  "));
  EXPECT_FALSE(Matcher(g).can_accept(fmt::format("[\n{}", std::string(40, ' '))));
}

}  // namespace
