#pragma once
// The chat page at "/" and its static files, served from bytes embedded in the binary.
namespace httplib {
class Server;
}

namespace splash::server {

void register_web_routes(httplib::Server& http);

}  // namespace splash::server
