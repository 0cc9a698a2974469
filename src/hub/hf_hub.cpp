#include "hub/hf_hub.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "common/error.h"
#include "hub/atomic_file.h"
#include "hub/download.h"

namespace splash::hub {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// A repository name or path component: letters, digits, '-', '_', '.', and not "." or "..".
bool valid_name(std::string_view part) {
  if (part.empty() || part == "." || part == ".." || part.size() > 200) return false;
  return std::all_of(part.begin(), part.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool valid_path(std::string_view path) {
  if (path.empty() || path.size() > 1000) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    if (!valid_name(path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start)))
      return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool is_commit(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isxdigit(c); });
}

fs::path hf_home() {
  if (const auto home = env("HF_HOME"); !home.empty()) return home;
  return fs::path(env("HOME")) / ".cache" / "huggingface";
}

std::string endpoint() {
  std::string url = env("HF_ENDPOINT");
  if (url.empty()) url = "https://huggingface.co";
  while (url.ends_with('/')) url.pop_back();
  return url;
}

std::string token() {
  if (auto value = env("HF_TOKEN"); !value.empty()) return value;
  std::ifstream in(hf_home() / "token");
  std::string value;
  std::getline(in, value);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  return value;
}

bool offline() {
  const std::string value = lower(env("HF_HUB_OFFLINE"));
  return value == "1" || value == "true" || value == "yes" || value == "on";
}

fs::path repo_dir(const std::string& repo) {
  const size_t slash = repo.find('/');
  return hub_cache_dir() / ("models--" + repo.substr(0, slash) + "--" + repo.substr(slash + 1));
}

// The file a reference without one means: the repository's one GGUF, or among several the
// one quantized Q4_K_M (vision projectors, "mmproj", are never the model).
std::string choose_gguf(const std::vector<std::string>& files, const HubReference& reference) {
  std::vector<std::string> ggufs, preferred;
  for (const auto& file : files) {
    const std::string name = lower(file);
    if (!name.ends_with(".gguf") || name.find("mmproj") != std::string::npos) continue;
    ggufs.push_back(file);
    if (name.find("q4_k_m") != std::string::npos) preferred.push_back(file);
  }
  if (ggufs.size() == 1) return ggufs.front();
  if (preferred.size() == 1) return preferred.front();
  if (ggufs.empty()) fail("{} has no GGUF file; splash runs GGUF models", reference.repo);
  std::sort(ggufs.begin(), ggufs.end());
  std::string names;
  for (size_t i = 0; i < ggufs.size() && i < 12; ++i) names += (i ? ", " : "") + ggufs[i];
  if (ggufs.size() > 12) names += fmt::format(" and {} more", ggufs.size() - 12);
  fail("{} has {} GGUF files; name one as {}:FILE ({})", reference.repo, ggufs.size(), reference.repo, names);
}

void write_ref(const fs::path& dir, const std::string& revision, const std::string& commit) {
  fs::create_directories(dir / "refs");
  AtomicFile ref(dir / "refs" / revision);
  ref.write(commit);
  ref.commit();
}

// Offline: the commit the cache last saw for the revision, and the file in its snapshot.
fs::path from_cache(const HubReference& reference) {
  const fs::path dir = repo_dir(reference.repo);
  std::string commit = reference.revision;
  if (!is_commit(commit)) {
    std::ifstream in(dir / "refs" / reference.revision);
    std::getline(in, commit);
  }
  const fs::path snapshot = dir / "snapshots" / commit;
  std::error_code error;
  if (commit.empty() || !fs::is_directory(snapshot, error))
    fail("HF_HUB_OFFLINE is set and the hub cache has no snapshot of {} ({}); unset it to download", reference.repo,
         dir.string());
  std::string file = reference.file;
  if (file.empty()) {
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(snapshot, error); !error && it != fs::recursive_directory_iterator();
         it.increment(error))
      files.push_back(it->path().lexically_relative(snapshot).generic_string());  // (links not followed)
    file = choose_gguf(files, reference);
  }
  const fs::path path = snapshot / file;
  if (!fs::is_regular_file(path, error))
    fail("HF_HUB_OFFLINE is set and the hub cache has no {} of {} ({}); unset it to download", file, reference.repo,
         snapshot.string());
  return path;
}

}  // namespace

std::optional<HubReference> parse_hub_reference(std::string_view text) {
  HubReference reference;
  const size_t colon = text.find(':');
  const std::string_view repo = text.substr(0, colon);
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos) return std::nullopt;
  if (!valid_name(repo.substr(0, slash)) || !valid_name(repo.substr(slash + 1))) return std::nullopt;
  reference.repo = std::string(repo);
  if (colon != std::string_view::npos) {
    const std::string_view file = text.substr(colon + 1);
    if (!valid_path(file)) return std::nullopt;
    reference.file = std::string(file);
  }
  return reference;
}

fs::path hub_cache_dir() {
  if (const auto cache = env("HF_HUB_CACHE"); !cache.empty()) return cache;
  return hf_home() / "hub";
}

fs::path ensure_hub_model(const HubReference& reference, const ProgressFn& progress) {
  if (offline()) return from_cache(reference);
  const std::string hub = endpoint(), secret = token();
  std::vector<std::string> headers;
  if (!secret.empty()) headers.push_back("Authorization: Bearer " + secret);

  // What the revision holds: its commit, its files, and each large file's size and sha256.
  const std::string api = fmt::format("{}/api/models/{}/revision/{}?blobs=true", hub, reference.repo, reference.revision);
  const HttpResponse answer = http_get(api, headers, 30, std::uint64_t{32} << 20);
  if (answer.status == 401 || answer.status == 403)
    fail("{} on {} is gated or private: {}", reference.repo, hub,
         secret.empty() ? "accept its terms on the hub and set HF_TOKEN" : "the token in HF_TOKEN was refused");
  if (answer.status == 404)
    fail("{}: no such model repository on {} (a private one needs HF_TOKEN)", reference.repo, hub);
  if (answer.status != 200) fail("{} answered HTTP {} for {}", hub, answer.status, reference.repo);
  const auto info = nlohmann::json::parse(answer.body, nullptr, false);
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() || !is_commit(info["sha"].get<std::string>()) ||
      !info.contains("siblings") || !info["siblings"].is_array())
    fail("{} sent an answer about {} that is not the hub's API", hub, reference.repo);
  const std::string commit = info["sha"];
  std::vector<std::string> files;
  for (const auto& sibling : info["siblings"])
    if (sibling.is_object() && sibling.contains("rfilename") && sibling["rfilename"].is_string())
      files.push_back(sibling["rfilename"]);
  const std::string file = reference.file.empty() ? choose_gguf(files, reference) : reference.file;
  if (std::find(files.begin(), files.end(), file) == files.end())
    fail("{} has no file {} at {}", reference.repo, file, reference.revision);
  if (!valid_path(file)) fail("{} names a file splash will not write: {}", reference.repo, file);
  std::optional<std::string> want_sha;
  std::optional<std::uint64_t> want_size;
  for (const auto& sibling : info["siblings"]) {
    if (!sibling.is_object() || sibling.value("rfilename", "") != file) continue;
    if (sibling.contains("size") && sibling["size"].is_number_unsigned()) want_size = sibling["size"].get<std::uint64_t>();
    if (sibling.contains("lfs") && sibling["lfs"].is_object()) {
      const auto& lfs = sibling["lfs"];
      if (lfs.contains("sha256") && lfs["sha256"].is_string()) want_sha = lower(lfs["sha256"].get<std::string>());
      if (lfs.contains("size") && lfs["size"].is_number_unsigned()) want_size = lfs["size"].get<std::uint64_t>();
    }
  }

  const fs::path dir = repo_dir(reference.repo), path = dir / "snapshots" / commit / file;
  std::error_code error;
  if (fs::is_regular_file(path, error) && (!want_size || fs::file_size(path, error) == *want_size)) {
    write_ref(dir, reference.revision, commit);
    return path;
  }
  fs::create_directories(dir / "blobs");
  const fs::path incoming = dir / "blobs" / (commit + ".incoming");
  DownloadOptions options;
  options.headers = headers;
  if (want_size) options.max_bytes = *want_size;
  const auto fetched = download_file(fmt::format("{}/{}/resolve/{}/{}", hub, reference.repo, commit, file), incoming,
                                     progress, options);
  if ((want_size && fetched.bytes != *want_size) || (want_sha && fetched.sha256 != *want_sha)) {
    fs::remove(incoming, error);
    fail("the download of {} from {} is not the file the hub describes ({} bytes, sha256 {}; expected {} bytes, {})",
         file, reference.repo, fetched.bytes, fetched.sha256, want_size ? std::to_string(*want_size) : "any",
         want_sha ? "sha256 " + *want_sha : "any sha256");
  }
  const fs::path blob = dir / "blobs" / fetched.sha256;
  fs::rename(incoming, blob);
  fs::create_directories(path.parent_path());
  fs::remove(path, error);
  fs::create_symlink(fs::relative(blob, path.parent_path()), path);
  write_ref(dir, reference.revision, commit);
  return path;
}

}  // namespace splash::hub
