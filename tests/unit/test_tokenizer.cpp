// Tokenizer tests: id-for-id parity with Hugging Face tokenizers on the golden cases made by
// tools/make_tokenizer_golden.py, hostile input, the streaming detokenizer, and hand-built
// vocabularies for the merge order.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "model_fixture.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace splash::tokenizer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of this thread: on a shared, busy machine it says more than wall time.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A validator written independently of tokenizer/utf8.h (Unicode Table 3-7), so the tests do
// not check the code with itself.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(s[i + k])); };
    const unsigned c = b(0);
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c <= 0x7F) n = 1;
    else if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned x = b(k);
      if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const nlohmann::json& golden() {
  static const nlohmann::json data = [] {
    std::ifstream in(splash::testing::golden_path("tokenizer_smollm2.json"));
    if (!in) throw std::runtime_error("missing golden file tokenizer_smollm2.json");
    return nlohmann::json::parse(in);
  }();
  return data;
}

std::string case_input(const nlohmann::json& c) {
  return c.contains("bytes_hex") ? from_hex(c["bytes_hex"].get<std::string>()) : c["text"].get<std::string>();
}

// Loading the 49k-token vocabulary takes a moment; the tests share one instance.
const Tokenizer& smollm(const std::string& path) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(path);
  if (it == loaded.end()) it = loaded.emplace(path, Tokenizer::from_gguf(gguf::File::open(path))).first;
  return it->second;
}

std::string describe(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// ------------------------------------------------------------------------------------------
// Golden parity with Hugging Face

TEST(TokenizerGolden, MetadataMatchesTheModel) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  EXPECT_EQ(tok.size(), golden()["header"]["vocab_size"].get<size_t>());
  EXPECT_EQ(tok.pre_tokenizer_name(), golden()["header"]["pre_tokenizer"].get<std::string>());
  EXPECT_EQ(tok.size(), 49152u);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.unk(), 0);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.token_bytes(0), "<|endoftext|>");
  EXPECT_EQ(tok.token_bytes(1), "<|im_start|>");
  EXPECT_EQ(tok.token_bytes(2), "<|im_end|>");
  EXPECT_EQ(tok.token_type(2), TokenType::control);
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_TRUE(tok.is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(tok.is_end_of_generation(1));
  EXPECT_FALSE(tok.is_end_of_generation(-1));
  EXPECT_FALSE(tok.is_end_of_generation(1 << 30));
  EXPECT_EQ(tok.find_token("<|im_end|>"), 2);
  const std::optional<int32_t> the = tok.find_token(" the");
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(tok.token_text(*the), "\xC4\xA0the");  // "Ġthe"
  EXPECT_EQ(tok.token_bytes(*the), " the");
  EXPECT_FALSE(tok.find_token("no such token, surely").has_value());
}

TEST(TokenizerGolden, EveryCaseMatchesHuggingFace) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  size_t checked = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"];
    const std::string input = case_input(c);
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok.encode(input);
    EXPECT_EQ(ids, expected) << name << "\n ours: " << describe(ids) << "\n   hf: " << describe(expected);

    const auto expected_plain = c.contains("ids_no_parse_special") ? c["ids_no_parse_special"].get<std::vector<int32_t>>() : expected;
    EXPECT_EQ(tok.encode(input, /*parse_special=*/false), expected_plain) << name << " (parse_special=false)";

    const std::string decoded = c["decoded"];
    EXPECT_EQ(tok.decode(expected), decoded) << name;
    const std::string skipped = c.contains("decoded_skip_special") ? c["decoded_skip_special"].get<std::string>() : decoded;
    EXPECT_EQ(tok.decode(expected, /*skip_special=*/true), skipped) << name << " (skip_special)";
    ++checked;
  }
  EXPECT_GE(checked, 80u);
}

TEST(TokenizerGolden, DecodeOfCutCharactersMatchesHuggingFace) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  for (const auto& c : golden()["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const std::string decoded = tok.decode(ids);
    EXPECT_EQ(decoded, c["text"].get<std::string>()) << describe(ids);
    EXPECT_TRUE(valid_utf8(decoded));
  }
}

// Needs no model: the splits of every supported pre-tokenizer against HF's own.
TEST(TokenizerPreTokenizer, SplitsMatchHuggingFace) {
  std::map<std::string, std::string> texts;
  for (const auto& c : golden()["cases"]) {
    if (c.contains("text")) texts[c["name"]] = c["text"];
  }
  const auto& names = golden()["pre_tokenizer_texts"];
  for (const auto& [pre_name, rows] : golden()["pre_tokenizer_cases"].items()) {
    const PreTokenizer pre = PreTokenizer::for_name(pre_name);
    ASSERT_EQ(rows.size(), names.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string& text = texts.at(names[i].get<std::string>());
      std::vector<std::string_view> pieces;
      pre.split(text, pieces);
      std::vector<size_t> lengths;
      for (std::string_view p : pieces) lengths.push_back(p.size());
      EXPECT_EQ(lengths, rows[i].get<std::vector<size_t>>()) << pre_name << " / " << names[i];
    }
  }
}

TEST(TokenizerPreTokenizer, UnknownNameIsRefusedWithTheSupportedList) {
  try {
    PreTokenizer::for_name("no-such-pre");
    FAIL() << "expected splash::Error";
  } catch (const splash::Error& e) {
    EXPECT_NE(std::string(e.what()).find("smollm"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------------------------------
// Hostile input

TEST(TokenizerHostile, InvalidUtf8IsEncodedAsReplacementCharacters) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  const std::string fffd = "\xEF\xBF\xBD";
  // Each maximal invalid subpart is one U+FFFD (Python's errors="replace").
  EXPECT_EQ(tok.encode("\x80"), tok.encode(fffd));
  EXPECT_EQ(tok.encode("a\x80\x80z"), tok.encode("a" + fffd + fffd + "z"));
  EXPECT_EQ(tok.encode("\xC0\xAF"), tok.encode(fffd + fffd));                 // overlong '/'
  EXPECT_EQ(tok.encode("\xE0\x80\xAF"), tok.encode(fffd + fffd + fffd));      // overlong 3-byte
  EXPECT_EQ(tok.encode("\xED\xA0\x80"), tok.encode(fffd + fffd + fffd));      // surrogate
  EXPECT_EQ(tok.encode("x\xF0\x9F\x98"), tok.encode("x" + fffd));             // truncated emoji
  EXPECT_EQ(tok.encode("\xE2\x82x"), tok.encode(fffd + "x"));
  EXPECT_EQ(tok.encode("\xF8\x88\x80\x80\x80"), tok.encode(fffd + fffd + fffd + fffd + fffd));
}

TEST(TokenizerHostile, NulBytesAreOrdinaryBytes) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  const std::string text("a\0b\0\0c", 6);
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TokenizerHostile, RandomBytesNeverCrashAndDecodeToValidUtf8) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string bytes(rng() % 512, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    const std::string decoded = tok.decode(tok.encode(bytes));
    EXPECT_TRUE(valid_utf8(decoded));
  }
  // One 1 MB blob of random bytes, all at once.
  std::string blob(1 << 20, '\0');
  for (char& c : blob) c = static_cast<char>(rng() & 0xFF);
  const auto start = Clock::now();
  const std::vector<int32_t> ids = tok.encode(blob);
  EXPECT_FALSE(ids.empty());
  EXPECT_TRUE(valid_utf8(tok.decode(ids)));
  EXPECT_LT(seconds_since(start), 60.0);
}

TEST(TokenizerHostile, MegabyteRunsOfOneCharacterStayFast) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  const std::vector<std::pair<const char*, std::string>> runs = {
      {"letters", std::string(1 << 20, 'a')},
      {"spaces", std::string(1 << 20, ' ')},
      {"newlines", std::string(1 << 20, '\n')},
      {"digits", std::string(1 << 20, '7')},
      {"punctuation", std::string(1 << 20, '!')},
      {"emoji", [] {
         std::string s;
         for (int i = 0; i < (1 << 18); ++i) s += "\xF0\x9F\x98\x80";
         return s;
       }()},
      {"cjk", [] {
         std::string s;
         for (int i = 0; i < 350000; ++i) s += "\xE6\x97\xA5";
         return s;
       }()},
  };
  for (const auto& [name, text] : runs) {
    const auto start = Clock::now();
    const std::vector<int32_t> ids = tok.encode(text);
    const double secs = seconds_since(start);
    EXPECT_EQ(tok.decode(ids), text) << name;
    EXPECT_LT(secs, 30.0) << name;  // the bound is only against quadratic blow-ups
    std::printf("[ tokenizer ] 1 MB run of %s: %zu tokens in %.3f s\n", name, ids.size(), secs);
  }
}

TEST(TokenizerHostile, HundredThousandSpecialTokens) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "<|im_start|>";
  auto start = Clock::now();
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids.size(), 100000u);
  EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int32_t id) { return id == 1; }));
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_TRUE(tok.decode(ids, /*skip_special=*/true).empty());
  // Without parse_special they are plain text, and still round-trip.
  const std::vector<int32_t> plain = tok.encode(text, /*parse_special=*/false);
  EXPECT_GT(plain.size(), 100000u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok.decode(plain), text);
  // Almost-special tokens make the matcher walk and give up at every position.
  std::string almost;
  for (int i = 0; i < 100000; ++i) almost += "<|im_start|";
  EXPECT_EQ(tok.decode(tok.encode(almost)), almost);
  EXPECT_LT(seconds_since(start), 30.0);
}

TEST(TokenizerHostile, OutOfRangeIdsThrow) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  const std::vector<int32_t> too_big = {1, 49152};
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(tok.decode(too_big), splash::Error);
  EXPECT_THROW(tok.decode(negative), splash::Error);
  EXPECT_THROW(tok.token_bytes(1 << 30), splash::Error);
  EXPECT_THROW(tok.token_type(-5), splash::Error);
  StreamingDetokenizer stream(tok);
  EXPECT_THROW(stream.push(-1), splash::Error);
}

TEST(TokenizerHostile, ConcurrentEncodesAgree) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  std::vector<std::string> inputs;
  for (const auto& c : golden()["cases"]) inputs.push_back(case_input(c));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& in : inputs) expected.push_back(tok.encode(in));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (tok.encode(inputs[(i + t) % inputs.size()]) != expected[(i + t) % inputs.size()]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// ------------------------------------------------------------------------------------------
// Streaming detokenizer

void expect_streams_like_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                                const std::string& label) {
  StreamingDetokenizer stream(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    ASSERT_TRUE(valid_utf8(piece)) << label << ": broken UTF-8 after id " << id;
    streamed += piece;
  }
  const std::string rest = stream.flush();
  ASSERT_TRUE(valid_utf8(rest)) << label;
  streamed += rest;
  EXPECT_EQ(streamed, tok.decode(ids, skip_special)) << label;
}

TEST(TokenizerStreaming, GoldenCasesStreamExactlyLikeDecode) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  for (const auto& c : golden()["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    expect_streams_like_decode(tok, ids, false, c["name"]);
    expect_streams_like_decode(tok, ids, true, c["name"].get<std::string>() + " (skip_special)");
  }
}

TEST(TokenizerStreaming, EmojiSplitAcrossTokensIsHeldUntilComplete) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";  // man ZWJ woman
  const std::vector<int32_t> ids = tok.encode(family);
  ASSERT_GT(ids.size(), 2u) << "expected the emoji to span several byte-level tokens";
  StreamingDetokenizer stream(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(valid_utf8(piece));
    out += piece;
  }
  EXPECT_EQ(out, family);  // everything was complete by the last token
  EXPECT_TRUE(stream.flush().empty());
}

TEST(TokenizerStreaming, InvalidBytesAreNotHeldForever) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  const std::optional<int32_t> lead = tok.find_token("\xF0");  // first byte of a 4-byte character
  const std::optional<int32_t> a = tok.find_token("a");
  ASSERT_TRUE(lead && a);
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.push(*lead), "");                   // could still become an emoji
  EXPECT_EQ(stream.push(*a), "\xEF\xBF\xBD" "a");      // it cannot any more
  EXPECT_EQ(stream.push(*lead), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");           // the end of the stream settles it
  EXPECT_EQ(stream.push(*a), "a");                     // flush started over
}

TEST(TokenizerStreaming, RandomIdSequencesStreamLikeDecode) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Tokenizer& tok = smollm(path);
  // Byte tokens >= 0x80 make broken sequences likely; mix them with random vocabulary ids.
  std::vector<int32_t> byte_tokens;
  for (int b = 0x80; b < 0x100; ++b) {
    if (auto id = tok.find_token(std::string(1, static_cast<char>(b)))) byte_tokens.push_back(*id);
  }
  ASSERT_FALSE(byte_tokens.empty());
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(rng() % 40);
    for (int32_t& id : ids) {
      id = rng() % 2 ? byte_tokens[rng() % byte_tokens.size()] : static_cast<int32_t>(rng() % tok.size());
    }
    expect_streams_like_decode(tok, ids, round % 2 == 1, "round " + std::to_string(round));
  }
}

// ------------------------------------------------------------------------------------------
// Hand-built vocabularies

// A vocabulary given in raw bytes; merges as (left, right) raw pairs, best first.
struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<TokenType> types;

  Tokenizer build(std::string pre = "gpt2") const {
    Vocabulary v;
    for (const std::string& t : tokens) v.tokens.push_back(byte_level::spell(t));
    for (const auto& [l, r] : merges) v.merges.push_back(byte_level::spell(l) + " " + byte_level::spell(r));
    v.token_types = types;
    v.pre_tokenizer = std::move(pre);
    return Tokenizer(std::move(v));
  }
};

std::vector<std::string> pieces_of(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (int32_t id : tok.encode(text)) out.push_back(tok.token_bytes(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerMerges, SamePairMergesLeftmostFirst) {
  const Tokenizer tok = TinyVocab{{"a", "aa"}, {{"a", "a"}}, {}}.build();
  EXPECT_EQ(pieces_of(tok, "aaa"), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces_of(tok, "aaaa"), (Pieces{"aa", "aa"}));
  EXPECT_EQ(pieces_of(tok, "aaaaa"), (Pieces{"aa", "aa", "a"}));
}

TEST(TokenizerMerges, LowerRankWinsWhateverThePosition) {
  const Tokenizer bc_first = TinyVocab{{"a", "b", "c", "ab", "bc"}, {{"b", "c"}, {"a", "b"}}, {}}.build();
  EXPECT_EQ(pieces_of(bc_first, "abc"), (Pieces{"a", "bc"}));
  const Tokenizer ab_first = TinyVocab{{"a", "b", "c", "ab", "bc"}, {{"a", "b"}, {"b", "c"}}, {}}.build();
  EXPECT_EQ(pieces_of(ab_first, "abc"), (Pieces{"ab", "c"}));
}

TEST(TokenizerMerges, MergesChainThroughNewSymbols) {
  const Tokenizer tok =
      TinyVocab{{"a", "b", "c", "d", "ab", "cd", "abcd"}, {{"c", "d"}, {"a", "b"}, {"ab", "cd"}}, {}}.build();
  EXPECT_EQ(pieces_of(tok, "abcd"), (Pieces{"abcd"}));
  EXPECT_EQ(pieces_of(tok, "abcda"), (Pieces{"abcd", "a"}));
  EXPECT_EQ(pieces_of(tok, "dcba"), (Pieces{"d", "c", "b", "a"}));
}

TEST(TokenizerMerges, DuplicateMergeKeepsItsFirstRank) {
  // (a,b) appears first and again after (b,c): its first, better rank must count.
  const Tokenizer tok = TinyVocab{{"a", "b", "c", "ab", "bc"}, {{"a", "b"}, {"b", "c"}, {"a", "b"}}, {}}.build();
  EXPECT_EQ(pieces_of(tok, "abc"), (Pieces{"ab", "c"}));
}

TEST(TokenizerMerges, MergeIntoTokenTheVocabularyLacksIsIgnored) {
  const Tokenizer tok = TinyVocab{{"a", "b", "bb"}, {{"a", "b"}, {"b", "b"}}, {}}.build();
  EXPECT_EQ(pieces_of(tok, "abb"), (Pieces{"a", "bb"}));
}

TEST(TokenizerMerges, BytesWithoutATokenAreDroppedBeforeMerging) {
  const Tokenizer tok = TinyVocab{{"a", "b", "ab"}, {{"a", "b"}}, {}}.build();
  // 'x' is not in the vocabulary; HF's BPE drops it before merging, so "a" and "b" meet.
  EXPECT_EQ(pieces_of(tok, "axb"), (Pieces{"ab"}));
}

TEST(TokenizerMerges, PiecesNeverMergeAcrossThePreTokenizerSplit) {
  const Tokenizer tok = TinyVocab{{"a", " ", " a", "a "}, {{"a", " "}, {" ", "a"}}, {}}.build();
  // GPT-2's split makes "a", " a": the better-ranked (a, ' ') pair is never adjacent in a piece.
  EXPECT_EQ(pieces_of(tok, "a a"), (Pieces{"a", " a"}));
}

// GPT-2's reference loop: find the best-ranked adjacent pair, merge every occurrence left to
// right, repeat. The heap-based implementation must give the same result.
std::vector<std::string> reference_bpe(const std::string& word, const std::map<std::pair<std::string, std::string>, size_t>& ranks) {
  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(1, c);
  while (symbols.size() > 1) {
    size_t best = SIZE_MAX;
    std::pair<std::string, std::string> best_pair;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks.find({symbols[i], symbols[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, best_pair = it->first;
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == best_pair.first && symbols[i + 1] == best_pair.second) {
        next.push_back(symbols[i] + symbols[i + 1]);
        ++i;
      } else {
        next.push_back(symbols[i]);
      }
    }
    symbols = std::move(next);
  }
  return symbols;
}

TEST(TokenizerMerges, AgreesWithTheReferenceLoopOnRandomVocabularies) {
  std::mt19937 rng(2024);
  for (int vocab_round = 0; vocab_round < 30; ++vocab_round) {
    // Grow a vocabulary over {a,b,c} by merging random existing tokens, like BPE training does.
    TinyVocab v{{"a", "b", "c"}, {}, {}};
    std::map<std::pair<std::string, std::string>, size_t> ranks;
    for (int m = 0; m < 40; ++m) {
      const std::string& l = v.tokens[rng() % v.tokens.size()];
      const std::string& r = v.tokens[rng() % v.tokens.size()];
      if (ranks.count({l, r}) || l.size() + r.size() > 8) continue;
      ranks[{l, r}] = v.merges.size();
      v.merges.emplace_back(l, r);
      if (std::find(v.tokens.begin(), v.tokens.end(), l + r) == v.tokens.end()) v.tokens.push_back(l + r);
    }
    const Tokenizer tok = v.build();
    for (int w = 0; w < 50; ++w) {
      std::string word(1 + rng() % 24, 'a');
      for (char& c : word) c = static_cast<char>('a' + rng() % 3);
      EXPECT_EQ(pieces_of(tok, word), reference_bpe(word, ranks)) << word;
    }
  }
}

TEST(TokenizerMerges, MegabyteWordMergesInNLogN) {
  // Merges that double: a+a, aa+aa, ... up to 1024 a's.
  TinyVocab v{{"a"}, {}, {}};
  std::string t = "a";
  for (int i = 0; i < 10; ++i) {
    v.merges.emplace_back(t, t);
    t += t;
    v.tokens.push_back(t);
  }
  const Tokenizer tok = v.build();
  const auto start = Clock::now();
  const std::vector<int32_t> ids = tok.encode(std::string(1 << 20, 'a'));
  EXPECT_EQ(ids.size(), 1024u);  // 2^20 / 2^10
  EXPECT_LT(seconds_since(start), 30.0);
}

// ------------------------------------------------------------------------------------------
// Special tokens and vocabulary validation

TEST(TokenizerSpecial, ControlOnlyWithParseSpecialUserDefinedAlways) {
  TinyVocab v{{"<", ">", "c", "t", "l", "u", "s", "e", "r", "<ctl>", "<user>"}, {}, {}};
  v.types.assign(v.tokens.size(), TokenType::normal);
  v.types[9] = TokenType::control;
  v.types[10] = TokenType::user_defined;
  const Tokenizer tok = v.build();
  EXPECT_EQ(tok.encode("<ctl><user>"), (std::vector<int32_t>{9, 10}));
  EXPECT_EQ(tok.encode("<ctl><user>", /*parse_special=*/false), (std::vector<int32_t>{0, 2, 3, 4, 1, 10}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{9, 10}, /*skip_special=*/true), "<user>");
  EXPECT_EQ(tok.find_token("<ctl>"), 9);
}

TEST(TokenizerSpecial, UnparsedControlTokenHidesUserDefinedTokensInsideIt) {
  TinyVocab v{{"<", "|", ">", "i", "m", "s", "<|ims|>", "ims"}, {}, {}};
  v.types.assign(v.tokens.size(), TokenType::normal);
  v.types[6] = TokenType::control;
  v.types[7] = TokenType::user_defined;
  const Tokenizer tok = v.build();
  EXPECT_EQ(tok.encode("<|ims|>ims"), (std::vector<int32_t>{6, 7}));
  // As HF with encode_special_tokens: the control token's whole span is plain text, so the
  // user-defined "ims" inside it is not matched; the one after it is.
  EXPECT_EQ(tok.encode("<|ims|>ims", /*parse_special=*/false), (std::vector<int32_t>{0, 1, 3, 4, 5, 1, 2, 7}));
}

TEST(TokenizerSpecial, LeftmostLongestMatch) {
  TinyVocab v{{"<", ">", "a", "b", "<a>", "<a><b>", "a><"}, {}, {}};
  v.types.assign(v.tokens.size(), TokenType::normal);
  v.types[4] = v.types[5] = v.types[6] = TokenType::user_defined;
  const Tokenizer tok = v.build();
  EXPECT_EQ(tok.encode("<a><b>"), (std::vector<int32_t>{5}));     // longest at position 0
  EXPECT_EQ(tok.encode("<a><a>"), (std::vector<int32_t>{4, 4}));  // leftmost beats "a><"
}

TEST(TokenizerValidation, InconsistentVocabulariesAreRefused) {
  Vocabulary empty;
  EXPECT_THROW(Tokenizer{empty}, splash::Error);

  Vocabulary bad_bos;
  bad_bos.tokens = {"a"};
  bad_bos.bos = 5;
  EXPECT_THROW(Tokenizer{bad_bos}, splash::Error);

  Vocabulary bad_types;
  bad_types.tokens = {"a", "b"};
  bad_types.token_types = {TokenType::normal};
  EXPECT_THROW(Tokenizer{bad_types}, splash::Error);

  Vocabulary bad_merge;
  bad_merge.tokens = {"a", "b", "ab"};
  bad_merge.merges = {"ab"};
  EXPECT_THROW(Tokenizer{bad_merge}, splash::Error);

  Vocabulary bad_pre;
  bad_pre.tokens = {"a"};
  bad_pre.pre_tokenizer = "made-up";
  EXPECT_THROW(Tokenizer{bad_pre}, splash::Error);
}

TEST(TokenizerValidation, OtherPreTokenizersBuild) {
  for (const std::string& name : PreTokenizer::supported_names()) {
    const Tokenizer tok = TinyVocab{{"a", " ", "1"}, {}, {}}.build(name);
    EXPECT_EQ(tok.decode(tok.encode("a 1 a")), "a 1 a") << name;
  }
}

// ------------------------------------------------------------------------------------------
// UTF-8 helpers

TEST(TokenizerUtf8, UnfinishedTailLength) {
  EXPECT_EQ(utf8::unfinished_tail_length(""), 0u);
  EXPECT_EQ(utf8::unfinished_tail_length("abc"), 0u);
  EXPECT_EQ(utf8::unfinished_tail_length("a\xF0"), 1u);
  EXPECT_EQ(utf8::unfinished_tail_length("a\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::unfinished_tail_length("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::unfinished_tail_length("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::unfinished_tail_length("a\xF0\x20"), 0u);  // already invalid: nothing to wait for
  EXPECT_EQ(utf8::unfinished_tail_length("\x80\x80\x80"), 0u);
  EXPECT_EQ(utf8::unfinished_tail_length("\xE0\x80"), 0u);  // overlong can never complete
}

// ------------------------------------------------------------------------------------------
// Speed (reported, not asserted)

TEST(TokenizerSpeed, EncodeMegabyteOfSourceCode) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  // A fresh instance, so the word cache starts empty as it would in a new process.
  const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(path));
  std::string code;
  const char* names[] = {"python", "cpp", "json", "diff", "shell", "rust", "html", "long_text", "operators"};
  while (code.size() < (1 << 20)) {
    for (const auto& c : golden()["cases"]) {
      for (const char* n : names) {
        if (c["name"] == n) code += c["text"].get<std::string>();
      }
    }
    code += "\n// " + std::to_string(code.size()) + " bytes so far\n";
  }
  auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const std::vector<int32_t> ids = tok.encode(code);
  const double cpu = thread_cpu_seconds() - cpu_start;
  const double secs = seconds_since(start);
  std::printf("[ tokenizer ] encode: %.2f MB of source code -> %zu tokens in %.3f s = %.1f MB/s (%.1f MB/s of CPU time)\n",
              code.size() / 1e6, ids.size(), secs, code.size() / 1e6 / secs, code.size() / 1e6 / cpu);
  start = Clock::now();
  const std::string text = tok.decode(ids);
  std::printf("[ tokenizer ] decode: %.1f MB/s\n", code.size() / 1e6 / seconds_since(start));
  EXPECT_EQ(text, code);
}

}  // namespace
}  // namespace splash::tokenizer
