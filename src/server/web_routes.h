#pragma once
// The chat page at "/" and its static files, served from bytes embedded in the binary.
#include <httplib.h>

#include <functional>

namespace splash::server {

// guard wraps the handler with the checks every route passes (Host allowlist, API key).
using RouteGuard = std::function<httplib::Server::Handler(httplib::Server::Handler)>;
void register_web_routes(httplib::Server& http, const RouteGuard& guard);

}  // namespace splash::server
