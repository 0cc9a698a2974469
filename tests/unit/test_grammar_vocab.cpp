// Token masks over the real SmolLM2 vocabulary (49152 tokens): exactness against can_accept in
// a few decoding states, and timings of fill_mask / can_accept, printed (never asserted).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/lark.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "model_fixture.h"
#include "test_grammar_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace splash::grammar;
using splash::tokenizer::TokenType;

struct Vocab {
  std::vector<std::string> bytes;
  std::vector<bool> excluded;
};

Vocab load_vocab(const std::string& path) {
  const auto file = splash::gguf::File::open(path);
  const auto tok = splash::tokenizer::Tokenizer::from_gguf(file);
  Vocab v;
  for (size_t i = 0; i < tok.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const auto type = tok.token_type(id);
    const bool special = type == TokenType::control || type == TokenType::user_defined || type == TokenType::unused;
    v.bytes.push_back(special ? std::string() : tok.token_bytes(id));
    v.excluded.push_back(special);
  }
  return v;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void time_state(const char* label, const Matcher& m, const TokenTrie& trie, const Vocab& v) {
  splash::grammar::testing::expect_mask_exact(m, trie, v.bytes, label);
  std::vector<uint8_t> mask;
  Matcher fresh = m;  // a copy has the same warm caches; time a cold one separately below
  auto t0 = std::chrono::steady_clock::now();
  m.fill_mask(trie, mask);
  const double warm_first = ms_since(t0);
  constexpr int kRuns = 20;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) m.fill_mask(trie, mask);
  const double warm = ms_since(t0) / kRuns;
  size_t allowed = 0;
  for (uint8_t x : mask) allowed += x;
  // can_accept of every token, averaged.
  t0 = std::chrono::steady_clock::now();
  size_t yes = 0;
  for (const auto& s : v.bytes) yes += !s.empty() && m.can_accept(s);
  const double per_token_us = ms_since(t0) * 1000.0 / static_cast<double>(v.bytes.size());
  std::printf("[ timing ] %-28s allowed %5zu/%zu  fill_mask %.3f ms (warm, after a %.3f ms run)  can_accept %.3f us/token\n",
              label, allowed, v.bytes.size(), warm, warm_first, per_token_us);
  EXPECT_EQ(yes, allowed);
}

// Time a fill_mask from a matcher whose caches have never seen this state.
void time_cold(const char* label, const std::shared_ptr<const Grammar>& g, std::string_view prefix, const TokenTrie& trie) {
  Matcher m(g);
  ASSERT_TRUE(m.accept(prefix));
  std::vector<uint8_t> mask;
  const auto t0 = std::chrono::steady_clock::now();
  m.fill_mask(trie, mask);
  std::printf("[ timing ] %-28s fill_mask %.3f ms (cold: fresh matcher)\n", label, ms_since(t0));
}

TEST(TokenMask, RealVocabularyExactnessAndTimings) {
  SPLASH_REQUIRE_TEST_MODEL(model);
  const Vocab v = load_vocab(model);
  auto t0 = std::chrono::steady_clock::now();
  const TokenTrie trie(v.bytes, v.excluded);
  std::printf("[ timing ] token trie: %zu tokens, %zu nodes, built in %.1f ms\n", v.bytes.size(), trie.nodes().size(),
              ms_since(t0));

  const auto schema = nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age"],"additionalProperties":false})");
  const auto js = compile_json_schema(schema);
  {
    Matcher m(js);
    time_cold("json: start of object", js, "", trie);
    time_state("json: start of object", m, trie, v);
    ASSERT_TRUE(m.accept("{\"name\": \"Ada"));
    time_cold("json: inside a string", js, "{\"name\": \"Ada", trie);
    time_state("json: inside a string", m, trie, v);
    ASSERT_TRUE(m.accept("\", \"age\": 1"));
    time_state("json: inside an integer", m, trie, v);
  }
  {
    const auto any = compile_json_schema(nlohmann::json::object());
    Matcher m(any);
    ASSERT_TRUE(m.accept("{\"a\": [1, {\"b\": \"x"));
    time_state("json any: nested string", m, trie, v);
  }
  std::ifstream in(splash::testing::golden_path("codex_apply_patch.lark"));
  std::stringstream ss;
  ss << in.rdbuf();
  const auto patch = compile_lark(ss.str());
  {
    Matcher m(patch);
    time_state("apply_patch: start", m, trie, v);
    const std::string prefix = "*** Begin Patch\n*** Update File: src/app.py\n@@ def main():\n-    x = 1\n+    x = ";
    ASSERT_TRUE(m.accept(prefix));
    time_cold("apply_patch: inside a line", patch, prefix, trie);
    time_state("apply_patch: inside a line", m, trie, v);
    ASSERT_TRUE(m.accept("2\n"));
    time_state("apply_patch: line start", m, trie, v);
  }
}

}  // namespace
