#pragma once
// The web chat page (web/ plus Debian's marked, highlight.js and DOMPurify), compiled into
// the binary by src/server/web_assets.cmake as byte arrays in generated/web_assets.cpp.

#include <string_view>

namespace splash::server {

struct WebAsset {
  std::string_view path;          // URL path, e.g. "/index.html", "/vendor/marked.min.js"
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;          // the file's bytes, exactly
};

// The asset served at `path` ("/" is index.html; a query string is ignored), or nullptr.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace splash::server
