#include "server/http/message.h"

#include <ostream>  // before Boost 1.81's string_view, which needs it and does not include it

#include <boost/beast/http/status.hpp>

namespace splash::server::http {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string Request::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (iequals(key, name)) return value;
  return {};
}

size_t Request::header_count(std::string_view name) const {
  size_t count = 0;
  for (const auto& field : headers) count += iequals(field.first, name);
  return count;
}

std::string_view reason_phrase(int status) {
  const auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  return reason.empty() ? std::string_view("Unknown") : std::string_view(reason.data(), reason.size());
}

std::optional<std::string> percent_decode_segment(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out += segment[i];
      continue;
    }
    if (i + 2 >= segment.size()) return std::nullopt;  // "%" or "%4" at the end
    const int high = hex(segment[i + 1]), low = hex(segment[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    const char c = static_cast<char>(high * 16 + low);
    if (c == '\0' || c == '/') return std::nullopt;
    out += c;
    i += 2;
  }
  return out;
}

}  // namespace splash::server::http
