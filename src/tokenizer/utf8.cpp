#include "tokenizer/utf8.h"

#include <cstdint>

namespace splash::tokenizer::utf8 {

namespace {

// The allowed range of the second byte depends on the lead byte (this excludes overlong forms,
// surrogates and code points above U+10FFFF); later bytes are always 80..BF.
struct LeadRule {
  size_t length;  // 0: the byte can never start a sequence
  uint8_t second_low;
  uint8_t second_high;
};

LeadRule rule_for(uint8_t lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead < 0xC2) return {0, 0, 0};  // continuation bytes and overlong 2-byte leads
  if (lead < 0xE0) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};
  if (lead < 0xF0) return {3, 0x80, 0xBF};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead < 0xF4) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Sequence read(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  const LeadRule rule = rule_for(lead);
  if (rule.length == 1) return {Status::valid, 1, lead};
  if (rule.length == 0) return {Status::invalid, 1, 0};

  char32_t code_point = lead & (0xFF >> (rule.length + 1));
  for (size_t k = 1; k < rule.length; ++k) {
    if (pos + k >= text.size()) return {Status::truncated, k, 0};
    const uint8_t next = byte(pos + k);
    const uint8_t low = k == 1 ? rule.second_low : 0x80;
    const uint8_t high = k == 1 ? rule.second_high : 0xBF;
    if (next < low || next > high) return {Status::invalid, k, 0};
    code_point = (code_point << 6) | (next & 0x3F);
  }
  return {Status::valid, rule.length, code_point};
}

bool is_valid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII dominates real text; skip it without the full decoder.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Sequence seq = read(text, pos);
    if (seq.status != Status::valid) return false;
    pos += seq.length;
  }
  return true;
}

std::string repair(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Sequence seq = read(text, pos);
    if (seq.status == Status::valid) {
      out.append(text.substr(pos, seq.length));
    } else {
      out.append(kReplacement);
    }
    pos += seq.length;
  }
  return out;
}

size_t unfinished_tail_length(std::string_view text) {
  // A sequence is at most 4 bytes, so only a lead byte in the last 3 can start an unfinished one.
  const size_t first = text.size() >= 3 ? text.size() - 3 : 0;
  for (size_t pos = text.size(); pos-- > first;) {
    const uint8_t b = static_cast<uint8_t>(text[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    return read(text, pos).status == Status::truncated ? text.size() - pos : 0;
  }
  return 0;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace splash::tokenizer::utf8
