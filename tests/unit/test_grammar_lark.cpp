// Lark grammars, above all Codex's apply_patch tool grammar (tests/golden/codex_apply_patch.lark).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"
#include "grammar/lark.h"
#include "grammar/matcher.h"
#include "model_fixture.h"
#include "test_grammar_util.h"

namespace {

using splash::Error;
using namespace splash::grammar;

std::string apply_patch_grammar() {
  std::ifstream in(splash::testing::golden_path("codex_apply_patch.lark"));
  EXPECT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.is_complete();
}

TEST(LarkApplyPatch, AcceptsRealisticPatches) {
  const auto g = compile_lark(apply_patch_grammar());
  const std::vector<std::string> good = {
      "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n+\n*** End Patch\n",
      "*** Begin Patch\n*** Delete File: src/old.rs\n*** End Patch",
      "*** Begin Patch\n*** Update File: src/main.py\n@@ def main():\n-    print(\"hi\")\n+    print(\"hello\")\n     return 0\n*** End Patch\n",
      "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n@@\n-x\n+y\n*** End of File\n*** End Patch\n",
      "*** Begin Patch\n*** Update File: only_move.txt\n*** Move to: moved.txt\n*** End Patch\n",
      "*** Begin Patch\n*** Add File: a\n+1\n*** Delete File: b\n*** Update File: c\n@@ class X\n@@     def f(self):\n-        pass\n+        return 1\n*** End Patch\n",
      "*** Begin Patch\n*** Update File: uni.txt\n-caf\xc3\xa9\n+caf\xc3\xa9 \xe2\x98\x95\n*** End Patch\n",
  };
  for (const auto& p : good) EXPECT_TRUE(matches(g, p)) << p;
}

TEST(LarkApplyPatch, RejectsMalformedPatches) {
  const auto g = compile_lark(apply_patch_grammar());
  const std::vector<std::string> bad = {
      "*** Add File: a\n+x\n*** End Patch\n",                                      // no Begin Patch
      "*** Begin Patch\n*** End Patch\n",                                          // no hunk
      "*** Begin Patch\n*** Add File: a\nno prefix\n*** End Patch\n",              // line without +
      "*** Begin Patch\n*** Add File: a\n*** End Patch\n",                         // add with no lines
      "*** Begin Patch\n*** Update File: a\nx line\n*** End Patch\n",              // change line prefix
      "*** Begin Patch\n*** Delete File: \n*** End Patch\n",                       // empty filename
      "*** Begin Patch\n*** Add File: a\n+x\n",                                    // no End Patch
      "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n\n",                   // trailing junk
      "*** begin patch\n*** Add File: a\n+x\n*** End Patch\n",                     // case matters
  };
  for (const auto& p : bad) EXPECT_FALSE(matches(g, p)) << p;
  Matcher m(g);
  EXPECT_FALSE(m.can_accept("diff --git"));
  EXPECT_EQ(m.forced_bytes(), "*** Begin Patch\n*** ");
}

TEST(LarkApplyPatch, RandomWalksAreStructurallyValid) {
  const auto g = compile_lark(apply_patch_grammar());
  int complete = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto w = splash::grammar::testing::random_byte_walk(g, seed, 3000, "\n");
    if (!w.complete) continue;
    ++complete;
    const std::string& t = w.text;
    ASSERT_EQ(t.rfind("*** Begin Patch\n", 0), 0u) << t;
    const bool ends = t.size() >= 13 && (t.compare(t.size() - 13, 13, "*** End Patch") == 0 ||
                                         t.compare(t.size() - 14, 14, "*** End Patch\n") == 0);
    EXPECT_TRUE(ends) << t;
    // Every line between the header and the footer is a hunk header or a prefixed line.
    std::istringstream lines(t);
    std::string line;
    std::getline(lines, line);
    std::string mode;
    while (std::getline(lines, line)) {
      if (line == "*** End Patch") break;
      if (line.rfind("*** Add File: ", 0) == 0) {
        mode = "add";
        EXPECT_GT(line.size(), 14u);
      } else if (line.rfind("*** Delete File: ", 0) == 0 || line.rfind("*** Update File: ", 0) == 0 ||
                 line.rfind("*** Move to: ", 0) == 0) {
        mode = "other";
      } else if (line == "*** End of File") {
      } else if (mode == "add") {
        EXPECT_EQ(line[0], '+') << t;
      } else {
        EXPECT_TRUE(line.rfind("@@", 0) == 0 || (!line.empty() && (line[0] == '+' || line[0] == '-' || line[0] == ' '))) << line;
      }
    }
    EXPECT_FALSE(matches(g, t + "x"));
  }
  EXPECT_GE(complete, 50);
}

TEST(LarkSyntax, FeaturesOfTheSubset) {
  const auto g = compile_lark(R"(
// a comment
?start: greeting ("," greeting)* [PUNCT] -> top
!greeting: "hello"i NAME
         | "bye" NUM~2..3
         | LETTER_RANGE+
NAME: /[a-z]+/
NUM.2: DIGIT
LETTER_RANGE: "x".."z"
PUNCT: "!" | "?"
%import common.DIGIT
%import common (WS, LF)
)");
  EXPECT_TRUE(matches(g, "HeLLobob"));
  EXPECT_FALSE(matches(g, "hello bob"));  // NAME right after "hello": no space in the grammar
  EXPECT_TRUE(matches(g, "hellobob"));
  EXPECT_TRUE(matches(g, "bye12,bye345!"));
  EXPECT_FALSE(matches(g, "bye1"));
  EXPECT_FALSE(matches(g, "bye1234"));
  EXPECT_TRUE(matches(g, "xyz?"));
  EXPECT_FALSE(matches(g, "xyw"));
}

TEST(LarkSyntax, CommonTerminals) {
  const auto g = compile_lark(R"(
start: SIGNED_NUMBER " " ESCAPED_STRING " " CNAME WS_INLINE? NEWLINE
%import common.SIGNED_NUMBER
%import common.ESCAPED_STRING
%import common.CNAME
%import common.WS_INLINE
%import common.NEWLINE
)");
  EXPECT_TRUE(matches(g, "-1.5e3 \"a \\\" b\" _x9\n"));
  EXPECT_TRUE(matches(g, "42 \"\" y  \r\n\n"));
  EXPECT_FALSE(matches(g, "42 \"unterminated y\n"));
  EXPECT_FALSE(matches(g, "4 \"s\" 9x\n"));
}

TEST(LarkSyntax, ErrorsCarryLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"start: a\n", "'a' is used but never defined"},
      {"start: \"x\"\n%ignore WS\n", "line 2:2: %ignore is unsupported"},
      {"start: (\"x\"\n", "expected ')'"},
      {"start: /a(?=b)/\n", "line 1:8"},
      {"start: /a(?=b)/\n", "lookahead"},
      {"start: \"x\n", "unterminated string"},
      {"foo: \"x\"\n", "no 'start' rule"},
      {"start: \"a\"\nstart: \"b\"\n", "line 2:1: 'start' is defined twice"},
      {"start: x\nx: x \"a\" | \"b\"\n", "left-recursive"},
      {"start: \"a\" @\n", "line 1:12: unexpected character"},
      {"%import common.NOPE\nstart: \"a\"\n", "common.NOPE is not supported"},
      {"start: \"a\"~\n", "expected a count"},
  };
  for (const auto& [text, message] : cases) {
    try {
      compile_lark(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << text << " -> " << e.what();
    }
  }
}

}  // namespace
