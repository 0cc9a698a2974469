#pragma once
// UTF-8 helpers shared by the encoder (which must accept any bytes) and the decoders
// (which must never hand out a broken sequence). Invalid input is repaired with the
// "maximal subpart" rule of Unicode §3.9 / WHATWG: each maximal prefix of a sequence that
// could still have become valid is replaced by one U+FFFD. Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy (used by Hugging Face
// tokenizers) follow the same rule, which is what makes byte-for-byte parity possible.
#include <cstddef>
#include <string>
#include <string_view>

namespace splash::tokenizer::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Status { valid, invalid, truncated };

struct Sequence {
  Status status = Status::valid;
  // valid: bytes of the code point; invalid/truncated: bytes of the maximal subpart (>= 1).
  size_t length = 0;
  char32_t code_point = 0;  // meaningful only when valid
};

// Reads the sequence that starts at text[pos] (pos < text.size()). `truncated` means the bytes
// were a correct beginning but the text ended before the sequence was complete.
Sequence read(std::string_view text, size_t pos);

bool is_valid(std::string_view text);

// The text with every invalid or truncated sequence replaced by U+FFFD (see above).
std::string repair(std::string_view text);

// Number of bytes at the end of `text` that are the correct beginning of a sequence that is
// not finished yet (0 to 3): those are the bytes a streaming printer has to hold back.
size_t unfinished_tail_length(std::string_view text);

void append(std::string& out, char32_t code_point);

}  // namespace splash::tokenizer::utf8
