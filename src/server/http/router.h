#pragma once
// Routes by method and path. A pattern is a path whose segments are literal or "{}" (one
// non-empty segment, captured percent-decoded into Request::params); paths are compared as
// sent (no decoding, no "//" or "/./" folding), so "/%73tatus" is not "/status". HEAD is
// served by the GET route. A path no route has is offered to the fallback (the web page's
// files) when its predicate accepts it; a path some route has under another method is 405.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/message.h"

namespace splash::server::http {

class Router {
 public:
  void get(std::string pattern, Handler handler) { add("GET", std::move(pattern), std::move(handler)); }
  void post(std::string pattern, Handler handler) { add("POST", std::move(pattern), std::move(handler)); }
  void del(std::string pattern, Handler handler) { add("DELETE", std::move(pattern), std::move(handler)); }
  void add(std::string method, std::string pattern, Handler handler);
  // GET (and HEAD) of paths no route has and `applies` accepts.
  void fallback_get(std::function<bool(std::string_view path)> applies, Handler handler);

  enum class Outcome { Found, WrongMethod, NotFound };
  struct Match {
    Outcome outcome = Outcome::NotFound;
    const Handler* handler = nullptr;
    std::vector<std::string> params;
    std::string allowed;  // for WrongMethod: the methods the path has ("GET, POST")
  };
  Match find(std::string_view method, std::string_view path) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;  // "{}" captures
    Handler handler;
  };
  std::vector<Route> routes_;
  std::function<bool(std::string_view)> fallback_applies_;
  Handler fallback_;
};

}  // namespace splash::server::http
