#pragma once
// GPT-2's byte-level alphabet: every byte 0..255 is spelled as one printable code point, so a
// BPE vocabulary can be written as text and still cover arbitrary bytes (a space becomes 'Ġ',
// a newline 'Ċ'). Printable Latin-1 bytes spell themselves; the other 68 bytes take U+0100
// onwards in byte order. Normal tokens in a "gpt2" GGUF vocabulary are stored in this spelling.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace splash::tokenizer::byte_level {

char32_t code_point_of(uint8_t byte);
std::optional<uint8_t> byte_of(char32_t code_point);

// Raw bytes -> their spelling (UTF-8 text of the mapped code points).
std::string spell(std::string_view bytes);
// Spelling -> raw bytes; nullopt when the text holds a character outside the alphabet
// (or is not valid UTF-8), i.e. when it is not a byte-level spelling at all.
std::optional<std::string> unspell(std::string_view spelling);

}  // namespace splash::tokenizer::byte_level
