#include "hub/model_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "common/error.h"
#include "hub/atomic_file.h"
#include "hub/download.h"
#include "hub/sha256.h"
#include "hub/splash_home.h"

namespace splash::hub {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool is_lowercase_sha256(const std::string& hex) {
  return hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The member path is only ever used to look an entry up, and the output name is our
// own file_name, so a hostile zip cannot write elsewhere; still, a source naming an
// absolute or ".." path is a mistake worth refusing loudly.
bool is_safe_member_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.find('\\') != std::string::npos) return false;
  for (const auto& part : fs::path(path)) {
    if (part == ".." || part == ".") return false;
  }
  return path.back() != '/';
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

// What is wrong with a source, or nullptr when nothing is.
const char* source_problem(const ModelSource& source) {
  if (source.archive_url.empty()) return "archive_url is empty";
  if (!is_lowercase_sha256(source.archive_sha256)) return "archive_sha256 is not 64 lowercase hex";
  if (!is_lowercase_sha256(source.file_sha256)) return "file_sha256 is not 64 lowercase hex";
  if (source.archive_size == 0 || source.file_size == 0) return "a pinned size is 0";
  if (!is_safe_member_path(source.member_path)) {
    return "member_path is absolute or contains '..' (zip-slip)";
  }
  if (!is_plain_file_name(source.file_name)) return "file_name is not a plain file name";
  return nullptr;
}

void validate_source(const ModelSource& source) {
  if (const char* problem = source_problem(source)) {
    fail("model source '{}' is invalid: {} (member '{}', file '{}')", source.name, problem,
         source.member_path, source.file_name);
  }
}

fs::path sibling(const fs::path& file, const char* suffix) {
  fs::path result = file;
  result += suffix;
  return result;
}

// --- Verification stamp -------------------------------------------------------------
// Size + mtime + inode identify "the same file as last time" without reading 98 MB;
// the inode catches a file replaced by rename even when size and mtime were kept.

std::optional<std::string> describe_identity(const fs::path& file) {
  struct stat info {};
  if (::stat(file.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return std::nullopt;
  const long long mtime_ns =
      static_cast<long long>(info.st_mtim.tv_sec) * 1'000'000'000LL + info.st_mtim.tv_nsec;
  return fmt::format("size={}\nmtime_ns={}\ninode={}\n", static_cast<long long>(info.st_size),
                     mtime_ns, static_cast<unsigned long long>(info.st_ino));
}

std::string stamp_text(const std::string& identity, const std::string& sha256) {
  return "splash-verified-v1\n" + identity + "sha256=" + sha256 + "\n";
}

bool stamp_matches(const fs::path& file, const fs::path& stamp, const std::string& sha256) {
  const auto identity = describe_identity(file);
  if (!identity) return false;
  std::ifstream in(stamp, std::ios::binary);
  if (!in) return false;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str() == stamp_text(*identity, sha256);
}
bool stamp_matches(const fs::path& file, const fs::path& stamp, const ModelSource& source) {
  return stamp_matches(file, stamp, source.file_sha256);
}

void write_stamp(const fs::path& file, const fs::path& stamp, const std::string& sha256) {
  const auto identity = describe_identity(file);
  if (!identity) fail("{} disappeared right after it was verified", file.string());
  AtomicFile out(stamp);
  out.write(stamp_text(*identity, sha256));
  out.commit();
}
void write_stamp(const fs::path& file, const fs::path& stamp, const ModelSource& source) {
  write_stamp(file, stamp, source.file_sha256);
}

// A file that was already there (older run, or put there by hand) is kept when it
// hashes to the pinned value, which costs one read instead of a download.
bool existing_file_is_valid(const fs::path& file, const ModelSource& source) {
  std::error_code error;
  const auto size = fs::file_size(file, error);
  if (error || size != source.file_size) return false;
  return sha256_file_hex(file) == source.file_sha256;
}

// --- Lock -----------------------------------------------------------------------------

// flock on "<file>.lock": held for the whole fetch so that a second process waits and
// then finds the finished file. The lock file itself stays (removing it would race).
class DirectoryLock {
 public:
  DirectoryLock(const fs::path& path, const ProgressFn& progress) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      fail(
          "cannot create lock file {}: {}; check that the directory is writable or set SPLASH_HOME",
          path.string(), std::strerror(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (errno != EWOULDBLOCK) fail_lock(path);
    // finished=true: a terminal line is closed even when this process then has nothing to do.
    if (progress) {
      progress(
          Progress{.stage = "waiting for another splash process to fetch it", .finished = true});
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) fail_lock(path);
    }
  }
  ~DirectoryLock() { ::close(fd_); }  // closing releases the flock
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  [[noreturn]] void fail_lock(const fs::path& path) {
    const int saved = errno;
    ::close(fd_);
    fail("cannot lock {}: {}", path.string(), std::strerror(saved));
  }
  int fd_ = -1;
};

// --- Disk space -----------------------------------------------------------------------

void require_free_space(const fs::path& dir, std::uint64_t needed, const ModelSource& source) {
  struct statvfs info {};
  if (::statvfs(dir.c_str(), &info) != 0) return;  // unknown: let the writes report it
  const std::uint64_t available = static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
  if (available < needed) {
    fail(
        "not enough free disk space in {} to fetch {}: need {} MB, have {} MB; "
        "free some space or set SPLASH_HOME to another disk",
        dir.string(), source.name, needed / 1'000'000, available / 1'000'000);
  }
}

// --- Archive --------------------------------------------------------------------------

void fetch_archive(const ModelSource& source, const fs::path& archive, const ProgressFn& progress) {
  DownloadOptions options;
  options.max_bytes = source.archive_size;
  const DownloadResult result = download_file(source.archive_url, archive, progress, options);
  // On failure the caller's RemoveOnExit deletes the archive, as the messages promise.
  if (result.bytes != source.archive_size) {
    fail(
        "size mismatch for {}: expected {} bytes, got {}; the file was removed, run again to "
        "re-download",
        source.archive_url, source.archive_size, result.bytes);
  }
  if (result.sha256 != source.archive_sha256) {
    fail(
        "checksum mismatch for {}: expected sha256 {} got {}; the file was removed, run again to "
        "re-download",
        source.archive_url, source.archive_sha256, result.sha256);
  }
}

struct ZipArchiveCloser {
  void operator()(zip_t* archive) const { zip_discard(archive); }  // read-only: never writes
};
struct ZipFileCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};

std::string zip_open_error(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string message = zip_error_strerror(&error);
  zip_error_fini(&error);
  return message;
}

// A stage's progress with its average rate since `started`.
void report_rate(const ProgressFn& progress, std::string_view stage, std::uint64_t done, std::uint64_t total,
                 Clock::time_point started, bool finished) {
  if (!progress) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  progress(Progress{.stage = stage,
                    .done_bytes = done,
                    .total_bytes = total,
                    .bytes_per_second = seconds > 0 ? static_cast<double>(done) / seconds : 0,
                    .finished = finished});
}

// Streams the member into "<file>.partial", checking size and sha on the way, and only
// renames it to <file> when both match.
void extract_member(const ModelSource& source, const fs::path& archive_path,
                    const fs::path& destination, const ProgressFn& progress) {
  const auto corrupt = [&](const std::string& detail) {
    fail(
        "the archive downloaded from {} is damaged ({}); it was removed, run again to "
        "re-download or pass --model PATH",
        source.archive_url, detail);
  };

  int open_error = 0;
  std::unique_ptr<zip_t, ZipArchiveCloser> archive(
      zip_open(archive_path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &open_error));
  if (!archive) corrupt("not a readable zip: " + zip_open_error(open_error));

  const zip_int64_t index = zip_name_locate(archive.get(), source.member_path.c_str(), 0);
  if (index < 0) {
    fail(
        "the archive from {} has no member '{}'; upstream changed or the pinned source is "
        "wrong, pass --model PATH to use a local file",
        source.archive_url, source.member_path);
  }
  zip_stat_t info;
  zip_stat_init(&info);
  if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(index), 0, &info) != 0 ||
      (info.valid & ZIP_STAT_SIZE) == 0) {
    corrupt("cannot read the entry of " + source.member_path + ": " + zip_strerror(archive.get()));
  }
  if (info.size != source.file_size) {
    fail(
        "size mismatch for {} in {}: expected {} bytes, the archive says {}; pass --model PATH "
        "to use a local file",
        source.member_path, source.archive_url, source.file_size,
        static_cast<unsigned long long>(info.size));
  }

  std::unique_ptr<zip_file_t, ZipFileCloser> member(
      zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(index), 0));
  if (!member) corrupt("cannot open " + source.member_path + ": " + zip_strerror(archive.get()));

  AtomicFile out(destination);
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  std::uint64_t written = 0;
  const auto started = Clock::now();
  auto last_report = started;
  const auto report = [&](bool finished) { report_rate(progress, "extracting", written, source.file_size, started, finished); };
  for (;;) {
    const zip_int64_t got = zip_fread(member.get(), buffer.data(), buffer.size());
    // libzip checks the CRC at the end of the stream, so a damaged member fails here.
    if (got < 0) {
      corrupt("cannot read " + source.member_path + ": " + zip_file_strerror(member.get()));
    }
    if (got == 0) break;
    written += static_cast<std::uint64_t>(got);
    if (written > source.file_size) corrupt(source.member_path + " is longer than its entry says");
    out.write(buffer.data(), static_cast<std::size_t>(got));
    hasher.update(buffer.data(), static_cast<std::size_t>(got));
    if (Clock::now() - last_report > std::chrono::milliseconds(200)) {
      last_report = Clock::now();
      report(false);
    }
  }
  if (written != source.file_size) {
    corrupt(fmt::format("{} ended after {} of {} bytes", source.member_path, written,
                        source.file_size));
  }
  const std::string sha = hasher.finish_hex();
  if (sha != source.file_sha256) {
    fail(
        "checksum mismatch for {} extracted from {}: expected sha256 {} got {}; the file was "
        "removed, run again to re-download",
        source.member_path, source.archive_url, source.file_sha256, sha);
  }
  out.commit();
  report(true);
}

// Removes the downloaded archive however extraction ends.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(fs::path path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  fs::path path_;
};

fs::path prepare_models_dir() {
  const fs::path dir = models_dir();
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    fail(
        "cannot create the model directory {}: {}; set SPLASH_HOME to a writable directory or "
        "pass --model PATH",
        dir.string(), error.message());
  }
  return dir;
}

}  // namespace

fs::path cached_model_path(const ModelSource& source) { return models_dir() / source.file_name; }

fs::path ensure_model(const ModelSource& source, const ProgressFn& progress) {
  validate_source(source);
  const fs::path dir = prepare_models_dir();
  const fs::path model = dir / source.file_name;
  const fs::path stamp = sibling(model, ".verified");
  if (stamp_matches(model, stamp, source)) return model;  // the common case: nothing to do

  DirectoryLock lock(sibling(model, ".lock"), progress);
  // Whoever held the lock before us may have just finished the same work.
  if (stamp_matches(model, stamp, source)) return model;

  std::error_code ignored;
  fs::remove(stamp, ignored);
  if (fs::exists(model, ignored)) {
    if (existing_file_is_valid(model, source)) {
      write_stamp(model, stamp, source);
      return model;
    }
    fs::remove(model, ignored);  // damaged or outdated: fetch a fresh copy below
  }

  // Under the lock the temporary names are ours alone; leftovers of a killed run go.
  const fs::path archive = sibling(model, ".archive");
  fs::remove(archive, ignored);
  fs::remove(sibling(archive, ".partial"), ignored);
  fs::remove(sibling(model, ".partial"), ignored);

  require_free_space(dir, source.archive_size + source.file_size, source);
  RemoveOnExit remove_archive(archive);
  fetch_archive(source, archive, progress);
  extract_member(source, archive, model, progress);
  write_stamp(model, stamp, source);
  return model;
}

bool is_cached(const CatalogueModel& model) {
  std::error_code error;
  const auto size = fs::file_size(models_dir() / model.file_name, error);
  return !error && size == model.file_size;
}

namespace {

constexpr int kParallelPieces = 4;  // pieces downloaded at once

// The pieces of a model not yet in the cache, fetched kParallelPieces at a time (ensure_model
// each: verified, resumable piece by piece), their downloads reported as one: the bytes of
// every piece fetched in this run against all of theirs. After a failure no new piece is
// started, the ones under way finish (a later run keeps them), and the first error is thrown.
std::vector<fs::path> fetch_pieces(const CatalogueModel& model, const fs::path& dir, const ProgressFn& progress) {
  const size_t n = model.pieces.size();
  std::vector<fs::path> paths(n);
  std::vector<std::uint64_t> done(n, 0);
  std::vector<size_t> missing;
  std::uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const ModelSource& piece = model.pieces[i];
    const fs::path file = dir / piece.file_name;
    if (stamp_matches(file, sibling(file, ".verified"), piece)) {
      paths[i] = file;
    } else {
      missing.push_back(i);
      total += piece.archive_size;
    }
  }
  if (missing.empty()) return paths;
  std::mutex mutex;  // guards done, the reports and error
  const auto started = Clock::now();
  auto last_report = started;
  std::exception_ptr error;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const auto report = [&](bool finished) {  // under the mutex
    std::uint64_t sum = 0;
    for (const auto d : done) sum += d;
    report_rate(progress, "downloading", sum, total, started, finished);
  };
  const auto worker = [&] {
    for (size_t k = next++; k < missing.size() && !failed; k = next++) {
      const size_t i = missing[k];
      try {
        const fs::path path = ensure_model(model.pieces[i], [&, i](const Progress& p) {
          if (p.stage != "downloading") return;
          std::lock_guard lock(mutex);
          done[i] = p.done_bytes;
          if (Clock::now() - last_report > std::chrono::milliseconds(200)) {
            last_report = Clock::now();
            report(false);
          }
        });
        std::lock_guard lock(mutex);
        paths[i] = path;
        done[i] = model.pieces[i].archive_size;
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min<int>(kParallelPieces, static_cast<int>(missing.size())); ++w) workers.emplace_back(worker);
  for (auto& t : workers) t.join();
  if (error) std::rethrow_exception(error);
  std::lock_guard lock(mutex);
  report(true);
  return paths;
}

}  // namespace

fs::path ensure_catalogue_model(const CatalogueModel& model,
                                const std::function<ProgressFn(const std::string&)>& progress_for) {
  if (model.pieces.empty()) fail("catalogue model '{}' has no pieces", model.name);
  if (model.pieces.size() == 1) return ensure_model(model.pieces.front(), progress_for(model.title));
  if (!is_plain_file_name(model.file_name) || !is_lowercase_sha256(model.file_sha256) || model.file_size == 0)
    fail("catalogue model '{}' is invalid: its file name, size or sha256", model.name);
  for (const auto& piece : model.pieces) validate_source(piece);
  // What the stamp and the validity check read: the joined file's name, size and hash.
  ModelSource joined;
  joined.name = model.title;
  joined.file_name = model.file_name;
  joined.file_sha256 = model.file_sha256;
  joined.file_size = model.file_size;

  const fs::path dir = prepare_models_dir();
  const fs::path file = dir / model.file_name, stamp = sibling(file, ".verified");
  if (stamp_matches(file, stamp, joined)) return file;
  const ProgressFn progress = progress_for(model.title);
  DirectoryLock lock(sibling(file, ".lock"), progress);
  if (stamp_matches(file, stamp, joined)) return file;
  std::error_code ignored;
  fs::remove(stamp, ignored);
  const auto remove_pieces = [&] {
    for (const auto& piece : model.pieces)
      for (const char* suffix : {"", ".verified", ".lock"}) fs::remove(sibling(dir / piece.file_name, suffix), ignored);
  };
  if (fs::exists(file, ignored)) {
    if (existing_file_is_valid(file, joined)) {
      write_stamp(file, stamp, joined);
      remove_pieces();
      return file;
    }
    fs::remove(file, ignored);
  }
  fs::remove(sibling(file, ".partial"), ignored);
  require_free_space(dir, model.file_size, joined);  // (each piece checks its own room as it comes)

  const std::vector<fs::path> pieces = fetch_pieces(model, dir, progress);
  AtomicFile out(file);
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  std::uint64_t written = 0;
  const auto started = Clock::now();
  const auto report = [&](bool finished) {
    report_rate(progress, "joining the pieces", written, model.file_size, started, finished);
  };
  for (const auto& path : pieces) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read {} (a piece of {}): run again to fetch it", path.string(), model.name);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto got = static_cast<std::size_t>(in.gcount());
      if (got == 0) break;
      written += got;
      out.write(buffer.data(), got);
      hasher.update(buffer.data(), got);
    }
    report(false);
  }
  const std::string sha = hasher.finish_hex();
  if (written != model.file_size || sha != model.file_sha256) {
    remove_pieces();
    fail("the pieces of {} joined into {} bytes with sha256 {}, not the pinned {} bytes and {}; the pieces were "
         "removed, run again to fetch them",
         model.name, written, sha, model.file_size, model.file_sha256);
  }
  out.commit();
  report(true);
  write_stamp(file, stamp, joined);
  remove_pieces();
  return file;
}

bool verified_before(const fs::path& file, const std::string& sha256) {
  return stamp_matches(file, sibling(file, ".verified"), sha256);
}

void remember_verified(const fs::path& file, const std::string& sha256) {
  write_stamp(file, sibling(file, ".verified"), sha256);
}

}  // namespace splash::hub
