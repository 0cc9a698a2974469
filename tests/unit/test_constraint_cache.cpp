// The compiled-constraint cache: hits by what the constraints are compiled from, a byte
// budget (least recently used out first), entries larger than the budget not kept.
#include "engine/constraint_cache.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/output_constraints.h"
#include "grammar/grammar.h"

namespace splash::engine {
namespace {

ChatRequest schema_request(int n) {
  ChatRequest request;
  request.output_format.kind = OutputFormat::Kind::JsonSchema;
  request.output_format.schema = {{"type", "string"}, {"const", "value " + std::to_string(n)}};
  return request;
}

// Constraints whose one grammar holds `elements` elements (a known size), counting compiles.
struct FakeCompiler {
  size_t elements;
  int compiles = 0;
  std::shared_ptr<const OutputConstraints> operator()(const ChatRequest&) {
    ++compiles;
    auto grammar = std::make_shared<grammar::Grammar>();
    grammar->code.resize(elements);
    auto out = std::make_shared<OutputConstraints>();
    out->text = grammar;
    return out;
  }
};

TEST(ConstraintCache, TheSameRequestIsCompiledOnce) {
  ConstraintCache cache(size_t{1} << 20);
  FakeCompiler compiler{100};
  auto compile = [&](const ChatRequest& r) { return compiler(r); };
  const auto first = cache.get(schema_request(1), compile);
  const auto again = cache.get(schema_request(1), compile);
  EXPECT_EQ(first, again);
  EXPECT_EQ(compiler.compiles, 1);
  cache.get(schema_request(2), compile);
  EXPECT_EQ(compiler.compiles, 2);
  const auto stats = cache.stats();
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 2u);
}

TEST(ConstraintCache, StaysInsideItsByteBudgetLeastRecentlyUsedOutFirst) {
  FakeCompiler compiler{100000};  // 800 KB of grammar an entry
  auto compile = [&](const ChatRequest& r) { return compiler(r); };
  const size_t entry = compiler(schema_request(0))->memory_bytes();
  ConstraintCache cache(entry * 7 / 2);  // room for three
  for (int n = 1; n <= 10; ++n) {
    cache.get(schema_request(n), compile);
    if (n == 8) cache.get(schema_request(8), compile);
    EXPECT_LE(cache.stats().bytes, entry * 7 / 2);
  }
  EXPECT_EQ(cache.stats().entries, 3u);
  const int before = compiler.compiles;
  cache.get(schema_request(10), compile);  // kept
  cache.get(schema_request(8), compile);
  EXPECT_EQ(compiler.compiles, before);
  cache.get(schema_request(1), compile);  // long gone
  EXPECT_EQ(compiler.compiles, before + 1);
}

TEST(ConstraintCache, AnEntryLargerThanTheBudgetIsReturnedNotKept) {
  FakeCompiler compiler{1000000};
  auto compile = [&](const ChatRequest& r) { return compiler(r); };
  ConstraintCache cache(size_t{1} << 20);
  const auto out = cache.get(schema_request(1), compile);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->text->code.size(), 1000000u);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

// A real schema's compiled size is counted: an enum of 5000 strings holds far more than its text.
TEST(ConstraintCache, CountsACompiledSchemasGrammar) {
  ChatRequest request;
  request.output_format.kind = OutputFormat::Kind::JsonSchema;
  nlohmann::json values = nlohmann::json::array();
  for (int i = 0; i < 5000; ++i) values.push_back("option number " + std::to_string(i));
  request.output_format.schema = {{"enum", values}};
  const auto compiled = compile_output_constraints(request);
  ASSERT_NE(compiled, nullptr);
  EXPECT_GT(compiled->memory_bytes(), request.output_format.schema.dump().size());
}

// Schemas the matcher cannot follow within its bound of parse states where the reply starts
// are refused when compiled (the caller's 400), naming what to simplify; large schemas that
// stay within it still compile.
std::string compile_error(const nlohmann::json& schema) {
  ChatRequest request;
  request.output_format.kind = OutputFormat::Kind::JsonSchema;
  request.output_format.schema = schema;
  try {
    compile_output_constraints(request);
  } catch (const splash::Error& e) {
    return e.what();
  }
  return {};
}

TEST(OutputConstraintBounds, APatternOfManyOptionalPartsIsRefused) {
  const std::string error = compile_error({{"type", "string"}, {"pattern", "^(a?){5000}b$"}});
  EXPECT_NE(error.find("too ambiguous"), std::string::npos) << error;
  EXPECT_NE(error.find("response format"), std::string::npos) << error;
}

TEST(OutputConstraintBounds, AnAnyOfOfManyWideObjectsIsRefused) {
  nlohmann::json any_of = nlohmann::json::array();
  for (int o = 0; o < 100; ++o) {
    nlohmann::json properties = nlohmann::json::object();
    for (int p = 0; p < 50; ++p) {
      std::string name = "o";
      name.append(std::to_string(o)).append("p").append(std::to_string(p));
      properties[name] = {{"type", "integer"}};
    }
    any_of.push_back({{"type", "object"}, {"properties", properties}});
  }
  const std::string error = compile_error({{"anyOf", any_of}});
  EXPECT_NE(error.find("too ambiguous"), std::string::npos) << error;
}

TEST(OutputConstraintBounds, LargeSchemasWithinTheBoundCompile) {
  nlohmann::json values = nlohmann::json::array();
  for (int i = 0; i < 5000; ++i) values.push_back("option number " + std::to_string(i));
  EXPECT_EQ(compile_error({{"enum", values}}), "");
  EXPECT_EQ(compile_error({{"type", "string"}, {"pattern", "^(ab|cd){1,50}$"}}), "");
  nlohmann::json properties = nlohmann::json::object();
  for (int p = 0; p < 200; ++p) properties[std::string("p").append(std::to_string(p))] = {{"type", "integer"}};
  EXPECT_EQ(compile_error({{"type", "object"}, {"properties", properties}}), "");
}

}  // namespace
}  // namespace splash::engine
