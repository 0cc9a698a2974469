#pragma once
// Turns generated token ids into printable text one token at a time. A token may end in the
// middle of a multi-byte character (emoji and CJK are often split over 2-4 byte-level tokens),
// so the bytes of an unfinished character are held back until the token that completes it
// arrives. Bytes that can no longer become a valid character are emitted as U+FFFD right away,
// so nothing is held forever; the held bytes are at most 3.
//
// Invariant: the concatenation of every push() and the final flush() equals
// Tokenizer::decode() of the same ids, and every returned string is valid UTF-8.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace splash::tokenizer {

class StreamingDetokenizer {
 public:
  // skip_special: control tokens (e.g. <|im_end|>) produce no text, as in decode().
  explicit StreamingDetokenizer(Tokenizer tokenizer, bool skip_special = false);

  // Text that became safe to print with this token (possibly empty). Throws splash::Error for
  // an id outside the vocabulary, leaving the held bytes untouched.
  std::string push(int32_t id);
  // Everything still held, an unfinished character as U+FFFD; then starts over.
  std::string flush();
  // Drops the held bytes without emitting them (e.g. when a sequence is cancelled).
  void reset() { held_.clear(); }

 private:
  Tokenizer tokenizer_;  // a cheap copy sharing the vocabulary, so lifetime is not a concern
  bool skip_special_;
  std::string held_;  // the start of a character whose remaining bytes have not arrived
};

}  // namespace splash::tokenizer
