#pragma once
// A fixture with the real default model's file, tokenizer and chat format, for tests that
// run the model (skipped when SPLASH_TEST_MODEL is unset, see model_fixture.h).
#include <gtest/gtest.h>

#include <memory>

#include "chat/chat_format.h"
#include "formats/gguf.h"
#include "model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace splash::testing {

class RealModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test_model_path();
    if (path.empty()) GTEST_SKIP() << "SPLASH_TEST_MODEL is not set";
    file_ = std::make_unique<gguf::File>(gguf::File::open(path));
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_gguf(*file_));
    chat_ = chat::chat_format_for(*file_);
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatFormat> chat_;
};

}  // namespace splash::testing
