#include "hub/model_package.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <system_error>
#include <vector>

#include "common/error.h"
#include "hub/atomic_file.h"
#include "hub/model_cache.h"
#include "hub/sha256.h"

namespace splash::hub {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "splash-model-package";
constexpr size_t kChunk = size_t{8} << 20;

// Reads `file` in chunks, hashing (and writing each chunk to `out` when given), reporting
// progress under `stage` at most a few times a second. Returns the sha256.
std::string stream_file(const fs::path& file, AtomicFile* out, std::string_view stage, const ProgressFn& progress) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot read {}", file.string());
  std::error_code error;
  const std::uint64_t total = fs::file_size(file, error);
  Sha256 hash;
  std::vector<char> buffer(kChunk);
  std::uint64_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    hash.update(buffer.data(), got);
    if (out) out->write(buffer.data(), got);
    done += got;
    const auto now = std::chrono::steady_clock::now();
    if (progress && now - last > std::chrono::milliseconds(250)) {
      last = now;
      const double seconds = std::chrono::duration<double>(now - start).count();
      progress(Progress{.stage = stage, .done_bytes = done, .total_bytes = total,
                        .bytes_per_second = seconds > 0 ? done / seconds : 0.0});
    }
  }
  if (in.bad()) fail("reading {} failed", file.string());
  if (progress) progress(Progress{.stage = stage, .done_bytes = done, .total_bytes = total, .finished = true});
  return hash.finish_hex();
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name != kPackageManifest && name.size() < 256;
}

PackageFile file_entry(const nlohmann::json& entry, const fs::path& dir) {
  if (!entry.is_object() || !entry.contains("role") || !entry["role"].is_string() || !entry.contains("name") ||
      !entry["name"].is_string() || !entry.contains("size") || !entry["size"].is_number_unsigned() ||
      !entry.contains("sha256") || !entry["sha256"].is_string())
    fail("{}: a file entry of the manifest lacks role, name, size or sha256", dir.string());
  PackageFile file{entry["role"], entry["name"], entry["size"], entry["sha256"]};
  if (!plain_file_name(file.name)) fail("{}: the manifest names a file outside the package: {}", dir.string(), file.name);
  if (file.role != "model" && file.role != "draft") fail("{}: unknown file role '{}'", dir.string(), file.role);
  return file;
}

}  // namespace

bool is_package(const fs::path& dir) {
  std::error_code error;
  return fs::is_directory(dir, error) && fs::is_regular_file(dir / kPackageManifest, error);
}

PackageContents open_package(const fs::path& dir, const ProgressFn& progress) {
  std::ifstream in(dir / kPackageManifest, std::ios::binary);
  if (!in) fail("{} is not a model package: it has no {}", dir.string(), kPackageManifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > (size_t{1} << 20)) fail("{}: the manifest is over 1 MiB", dir.string());
  PackageContents contents;
  contents.manifest = nlohmann::json::parse(text, nullptr, false);
  const auto& m = contents.manifest;
  if (!m.is_object() || m.value("format", "") != kFormat)
    fail("{}: {} is not a splash model package manifest", dir.string(), kPackageManifest);
  if (!m.contains("format_version") || !m["format_version"].is_number_integer())
    fail("{}: the manifest has no format_version", dir.string());
  if (const int version = m["format_version"]; version != kPackageFormatVersion)
    fail("{} is a model package of format version {}; this splash reads version {} (repack it with this version's "
         "`splash pack`)",
         dir.string(), version, kPackageFormatVersion);
  if (!m.contains("files") || !m["files"].is_array()) fail("{}: the manifest lists no files", dir.string());
  for (const auto& entry : m["files"]) {
    const PackageFile file = file_entry(entry, dir);
    const fs::path path = dir / file.name;
    std::error_code error;
    const auto size = fs::file_size(path, error);
    if (error) fail("{}: {} is missing", dir.string(), file.name);
    if (size != file.size)
      fail("{}: {} has {} bytes, the manifest says {}: the package is damaged", dir.string(), file.name, size, file.size);
    if (!verified_before(path, file.sha256)) {
      const std::string sha = stream_file(path, nullptr, "verifying", progress);
      if (sha != file.sha256)
        fail("{}: {} does not hash to the manifest's sha256 (it is {}): the package is damaged", dir.string(), file.name,
             sha);
      try {
        remember_verified(path, file.sha256);
      } catch (const Error&) {  // a read-only package is verified at every start instead
      }
    }
    if (file.role == "model") {
      if (!contents.model.empty()) fail("{}: the manifest lists two model files", dir.string());
      contents.model = path;
    } else {
      contents.draft = path;
    }
  }
  if (contents.model.empty()) fail("{}: the manifest lists no model file", dir.string());
  return contents;
}

nlohmann::json write_package(const fs::path& dir, const fs::path& model_file, const std::optional<fs::path>& draft_file,
                             const nlohmann::json& model, const nlohmann::json& baseline, const ProgressFn& progress) {
  if (is_package(dir)) fail("{} already holds a model package; pack into a new directory", dir.string());
  std::error_code exists_error;
  const bool created = !fs::exists(dir, exists_error);
  fs::create_directories(dir);
  nlohmann::json manifest{{"format", kFormat}, {"format_version", kPackageFormatVersion}, {"model", model},
                          {"files", nlohmann::json::array()}, {"baseline", baseline}};
  std::vector<fs::path> written;
  try {
    std::vector<std::pair<std::string, fs::path>> sources{{"model", model_file}};
    if (draft_file) sources.emplace_back("draft", *draft_file);
    for (const auto& [role, source] : sources) {
      const std::string name = source.filename().string();
      if (!plain_file_name(name)) fail("cannot pack {}: its name cannot be a package file's", source.string());
      const fs::path dest = dir / name;
      if (std::error_code error; fs::exists(dest, error)) fail("{} already exists", dest.string());
      AtomicFile out(dest);
      const std::string sha = stream_file(source, &out, "packing", progress);
      out.commit();
      written.push_back(dest);
      std::error_code error;
      const auto size = fs::file_size(dest, error);
      manifest["files"].push_back({{"role", role}, {"name", name}, {"size", size}, {"sha256", sha}});
      remember_verified(dest, sha);
      written.push_back(fs::path(dest) += ".verified");
    }
    AtomicFile out(dir / kPackageManifest);
    out.write(manifest.dump(2) + "\n");
    out.commit();
  } catch (...) {
    std::error_code ignored;
    for (const auto& path : written) fs::remove(path, ignored);
    if (created) fs::remove(dir, ignored);  // (only when empty again)
    throw;
  }
  return manifest;
}

}  // namespace splash::hub
