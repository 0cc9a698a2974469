#pragma once
// The chat page at "/" and its static files, served from bytes embedded in the binary.
#include <functional>

#include "server/http/router.h"

namespace splash::server {

// guard wraps the handler with the checks every route passes (Host allowlist, API key).
using RouteGuard = std::function<http::Handler(http::Handler)>;
void register_web_routes(http::Router& routes, const RouteGuard& guard);

}  // namespace splash::server
