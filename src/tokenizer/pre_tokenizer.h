#pragma once
// Pre-tokenization: cuts text into the pieces that BPE merges never cross (words, number
// groups, whitespace runs, punctuation runs). Which cuts a vocabulary was trained with is named
// by the GGUF key tokenizer.ggml.pre; using another split silently changes the ids, so an
// unknown name is refused instead of approximated.
//
// A pre-tokenizer is a sequence of regex stages, each applied to every piece the previous stage
// produced, keeping both the matches and the text between them ("isolated", as Hugging Face's
// Split and ByteLevel pre-tokenizers do). Regexes run in PCRE2 with UTF + UCP and JIT.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace splash::tokenizer {

class PreTokenizer {
 public:
  // Throws splash::Error naming the supported values when `name` is unknown.
  static PreTokenizer for_name(std::string_view name);
  static std::vector<std::string> supported_names();

  const std::string& name() const { return name_; }

  // Calls `emit` with each piece of `text`, in order; the pieces concatenate back to `text`.
  // `text` must be valid UTF-8 (the Tokenizer repairs its input first).
  using Emit = std::function<void(std::string_view)>;
  void split(std::string_view text, const Emit& emit) const;
  // The same, collected (convenient for tests and tools).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Stage;
  void split_from(size_t stage, std::string_view text, const Emit& emit) const;
  std::string name_;
  std::vector<std::shared_ptr<const Stage>> stages_;
};

}  // namespace splash::tokenizer
