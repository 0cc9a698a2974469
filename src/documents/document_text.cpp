#include "documents/document_text.h"

#include <poppler-document.h>
#include <poppler-global.h>
#include <poppler-page.h>

#include <memory>

#include "common/error.h"

namespace splash::documents {

namespace {

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;  // '-' and '_': the URL-safe alphabet, seen in the wild
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::string opening(std::string_view title) {
  std::string out = "<document";
  if (!title.empty()) {
    out += " title=\"";
    for (char c : title) out += c == '"' ? '\'' : (c == '\n' ? ' ' : c);
    out += '"';
  }
  out += ">\n";
  return out;
}

// poppler reports damaged files on stderr; the caller's error message says it instead.
void silence_poppler() {
  static const bool once = [] {
    poppler::set_debug_error_function([](const std::string&, void*) {}, nullptr);
    return true;
  }();
  (void)once;
}

}  // namespace

std::string decode_base64(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int count = 0;
  size_t padding = 0;
  for (unsigned char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0 || padding > 0) fail("the document's base64 data is invalid");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out += static_cast<char>((bits >> 16) & 0xFF);
      out += static_cast<char>((bits >> 8) & 0xFF);
      out += static_cast<char>(bits & 0xFF);
      bits = 0;
      count = 0;
    }
  }
  if (count == 1 || padding > 2) fail("the document's base64 data is invalid");
  if (count == 2) out += static_cast<char>((bits >> 4) & 0xFF);
  if (count == 3) {
    out += static_cast<char>((bits >> 10) & 0xFF);
    out += static_cast<char>((bits >> 2) & 0xFF);
  }
  return out;
}

std::string pdf_to_text(std::string_view pdf_bytes, std::string_view title) {
  silence_poppler();
  if (!pdf_bytes.starts_with("%PDF-")) fail("the document is not a PDF (it does not start with %PDF-)");
  std::unique_ptr<poppler::document> doc(
      poppler::document::load_from_raw_data(pdf_bytes.data(), static_cast<int>(pdf_bytes.size())));
  if (!doc) fail("the PDF could not be read (damaged or not a PDF)");
  if (doc->is_locked()) fail("the PDF is encrypted; send it without a password");
  const int pages = doc->pages();
  if (pages > kMaxPdfPages) fail("the PDF has {} pages; at most {} are read", pages, kMaxPdfPages);
  std::string out = opening(title);
  for (int i = 0; i < pages; ++i) {
    std::unique_ptr<poppler::page> page(doc->create_page(i));
    out += "--- Page " + std::to_string(i + 1) + " ---\n";
    if (!page) continue;
    const poppler::byte_array utf8 = page->text().to_utf8();
    out.append(utf8.begin(), utf8.end());
    if (!out.ends_with('\n')) out += '\n';
  }
  out += "</document>";
  return out;
}

std::string text_document(std::string_view text, std::string_view title) {
  std::string out = opening(title);
  out += text;
  if (!out.ends_with('\n')) out += '\n';
  out += "</document>";
  return out;
}

}  // namespace splash::documents
