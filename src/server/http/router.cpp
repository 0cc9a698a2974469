#include "server/http/router.h"

#include <optional>

namespace splash::server::http {
namespace {

// "/a/b" -> {"a", "b"}; "/" -> {""}; "/a/" -> {"a", ""} (a trailing slash is its own segment).
std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty() || path[0] != '/') return out;
  path.remove_prefix(1);
  for (;;) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

// The captures of `path` under `segments`, or nullopt when it does not match.
std::optional<std::vector<std::string>> match(const std::vector<std::string>& segments, std::string_view path) {
  const auto parts = split_path(path);
  if (parts.size() != segments.size()) return std::nullopt;
  std::vector<std::string> params;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (segments[i] != "{}") {
      if (parts[i] != segments[i]) return std::nullopt;
      continue;
    }
    if (parts[i].empty()) return std::nullopt;
    auto decoded = percent_decode_segment(parts[i]);
    if (!decoded) return std::nullopt;
    params.push_back(std::move(*decoded));
  }
  return params;
}

}  // namespace

void Router::add(std::string method, std::string pattern, Handler handler) {
  Route route{std::move(method), {}, std::move(handler)};
  for (const auto part : split_path(pattern)) route.segments.emplace_back(part);
  routes_.push_back(std::move(route));
}

void Router::fallback_get(std::function<bool(std::string_view)> applies, Handler handler) {
  fallback_applies_ = std::move(applies);
  fallback_ = std::move(handler);
}

Router::Match Router::find(std::string_view method, std::string_view path) const {
  const std::string_view wanted = method == "HEAD" ? std::string_view("GET") : method;
  Match result;
  for (const auto& route : routes_) {
    auto params = match(route.segments, path);
    if (!params) continue;
    if (route.method == wanted) {
      result.outcome = Outcome::Found;
      result.handler = &route.handler;
      result.params = std::move(*params);
      return result;
    }
    result.outcome = Outcome::WrongMethod;
    if (!result.allowed.empty()) result.allowed += ", ";
    result.allowed += route.method;
    if (route.method == "GET") result.allowed += ", HEAD";
  }
  if (result.outcome == Outcome::NotFound && wanted == "GET" && fallback_ && fallback_applies_(path)) {
    result.outcome = Outcome::Found;
    result.handler = &fallback_;
  }
  return result;
}

}  // namespace splash::server::http
