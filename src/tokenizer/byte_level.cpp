#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace splash::tokenizer::byte_level {

namespace {

bool spells_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> code_point{};
  std::array<int16_t, 0x144> byte{};  // indexed by code point; the alphabet ends below U+0144
  std::array<std::string, 256> spelling;
};

const Tables& tables() {
  static const Tables instance = [] {
    Tables t;
    t.byte.fill(-1);
    char32_t next_free = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = spells_itself(b) ? static_cast<char32_t>(b) : next_free++;
      t.code_point[b] = cp;
      t.byte[cp] = static_cast<int16_t>(b);
      utf8::append(t.spelling[b], cp);
    }
    return t;
  }();
  return instance;
}

}  // namespace

char32_t code_point_of(uint8_t byte) { return tables().code_point[byte]; }

std::optional<uint8_t> byte_of(char32_t code_point) {
  const Tables& t = tables();
  if (code_point >= t.byte.size() || t.byte[code_point] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.byte[code_point]);
}

std::string spell(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.spelling[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> unspell(std::string_view spelling) {
  std::string out;
  out.reserve(spelling.size());
  size_t pos = 0;
  while (pos < spelling.size()) {
    const utf8::Sequence seq = utf8::read(spelling, pos);
    if (seq.status != utf8::Status::valid) return std::nullopt;
    const std::optional<uint8_t> byte = byte_of(seq.code_point);
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
    pos += seq.length;
  }
  return out;
}

}  // namespace splash::tokenizer::byte_level
