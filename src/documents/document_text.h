#pragma once
// Documents attached to a conversation (Anthropic document blocks, OpenAI file parts) become
// text the model can read: a PDF's pages are extracted with poppler (Debian's maintained PDF
// library) and each starts with a page marker, so the model can cite pages.
#include <string>
#include <string_view>

namespace splash::documents {

// Standard base64 (RFC 4648, padding optional, whitespace ignored); splash::Error if invalid.
std::string decode_base64(std::string_view text);

// "<document title=...>\n--- Page 1 ---\n...\n</document>"; splash::Error for data that is not
// a readable PDF (damaged, encrypted) or has more than kMaxPdfPages pages.
inline constexpr int kMaxPdfPages = 2000;
std::string pdf_to_text(std::string_view pdf_bytes, std::string_view title);

// A plain-text document in the same wrapper.
std::string text_document(std::string_view text, std::string_view title);

}  // namespace splash::documents
