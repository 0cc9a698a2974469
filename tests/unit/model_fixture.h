#pragma once
// Where unit tests find the real default model and the golden fixtures.
// SPLASH_TEST_MODEL names the GGUF (make test sets it after fetching the default model);
// a test that needs the model is skipped only when the variable is unset, and fails
// loudly when it names a file that does not exist.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace splash::testing {

inline std::string golden_path(const std::string& name) {
  return std::string(SPLASH_SOURCE_DIR) + "/tests/golden/" + name;
}

inline std::string test_model_path() {
  const char* env = std::getenv("SPLASH_TEST_MODEL");
  return env ? std::string(env) : std::string();
}

}  // namespace splash::testing

#define SPLASH_REQUIRE_TEST_MODEL(var)                                                   \
  const std::string var = ::splash::testing::test_model_path();                          \
  if (var.empty()) GTEST_SKIP() << "SPLASH_TEST_MODEL is not set";                       \
  ASSERT_TRUE(std::filesystem::exists(var)) << "SPLASH_TEST_MODEL names a missing file: " << var
