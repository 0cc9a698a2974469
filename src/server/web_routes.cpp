#include "server/web_routes.h"

#include <string>

#include "server/request_guard.h"
#include "server/web_assets.h"

namespace splash::server {

void register_web_routes(http::Router& routes, const RouteGuard& guard) {
  auto serve = [](const http::Request& req, http::Response& res) {
    const WebAsset* asset = find_web_asset(req.path);
    if (!asset) {
      res.status = 404;  // rendered as JSON by the error handler
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    if (asset->content_type.starts_with("text/html"))
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'");
    res.set_content(std::string(asset->body), std::string(asset->content_type));
  };
  // Every GET that no route matched outside the API's paths: "/", "/app.js", "/vendor/marked.min.js", ...
  routes.fallback_get([](std::string_view path) { return is_public_route(path); }, guard(serve));
}

}  // namespace splash::server
