#include "server/http/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace splash::server::http {

struct Listener::Connection {
  int fd = -1;
  std::string peer;  // the client's address, without its port
  ByteStream::Phase phase = ByteStream::Phase::Idle;
  Clock::time_point since = Clock::now();  // in this phase
  std::atomic<bool> dropped{false};
};

namespace {

// How often a wait looks up from its socket to see whether it was dropped or the server stops.
constexpr auto kSlice = std::chrono::milliseconds(100);
// A client that takes none of a response for this long is gone (2 s once the server stops),
// and so is one that takes a write at less than kWriteMinRate overall (a reader of a byte now
// and then would hold its thread for ever).
constexpr auto kWriteStall = std::chrono::seconds(10);
constexpr auto kWriteStallStopping = std::chrono::seconds(2);
constexpr size_t kWriteMinRate = size_t{64} << 10;  // bytes a second
// A dropped connection still reads this long before its close, so its last answer is not
// lost to a reset.
constexpr auto kDroppedLinger = std::chrono::milliseconds(250);
// Connections accepted while every thread is busy wait for one, up to as many as there are
// threads; more are answered this at once and closed.
const std::string& busy_answer() {
  static const std::string answer = [] {
    const std::string body =
        R"({"error":{"message":"every connection of the server is taken; retry in a moment","type":"server_error"}})";
    return fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
        body.size(), body);
  }();
  return answer;
}

}  // namespace

class Listener::SocketStream final : public ByteStream {
 public:
  SocketStream(Listener::Connection& connection, Listener& listener) : c_(connection), listener_(listener) {}

  ReadResult read(char* buffer, size_t size, Clock::time_point deadline) override {
    return read_until(buffer, size, deadline, false);
  }

  ReadResult read_to_linger(char* buffer, size_t size, Clock::time_point deadline) override {
    if (c_.dropped.load() || listener_.stopping_.load()) deadline = std::min(deadline, Clock::now() + kDroppedLinger);
    return read_until(buffer, size, deadline, true);
  }

  ReadResult read_until(char* buffer, size_t size, Clock::time_point deadline, bool lingering) {
    for (;;) {
      if (!lingering && (c_.dropped.load() || listener_.stopping_.load())) return {Status::Dropped};
      const auto now = Clock::now();
      if (now >= deadline) return {Status::TimedOut};
      pollfd p{c_.fd, POLLIN, 0};
      const auto wait = std::min<Clock::duration>(deadline - now, kSlice);
      const int ready = ::poll(&p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
      if (ready < 0 && errno != EINTR) return {Status::Closed};
      if (ready <= 0) continue;
      const ssize_t n = ::recv(c_.fd, buffer, size, 0);
      if (n > 0) return {Status::Data, static_cast<size_t>(n)};
      if (n == 0) return {Status::Closed};
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return {Status::Closed};
    }
  }

  bool write(std::string_view data) override {
    const auto start = Clock::now();
    auto last_progress = start;
    const auto slowest = kWriteStall + std::chrono::milliseconds(data.size() * 1000 / kWriteMinRate);
    while (!data.empty()) {
      const ssize_t n = ::send(c_.fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        last_progress = Clock::now();
        continue;
      }
      if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      const auto now = Clock::now();
      if (listener_.stopping_.load() ? now - start > kWriteStallStopping
                                     : now - last_progress > kWriteStall || now - start > slowest)
        return false;
      pollfd p{c_.fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(kSlice.count())) < 0 && errno != EINTR) return false;
    }
    return true;
  }

  void shutdown_write() override { ::shutdown(c_.fd, SHUT_WR); }

  void set_phase(Phase phase) override {
    std::lock_guard lock(listener_.mutex_);
    c_.phase = phase;
    c_.since = Clock::now();
  }

  void kept_alive() override {
    std::lock_guard lock(listener_.mutex_);
    // Every thread taken and others waiting for one: this keep-alive is given up for them.
    if (!listener_.waiting_.empty() && listener_.served_.size() >= static_cast<size_t>(listener_.threads_))
      c_.dropped = true;
  }

  bool stopping() const override { return listener_.stopping_.load(); }

 private:
  Listener::Connection& c_;
  Listener& listener_;
};

namespace {

std::string peer_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  else if (address.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

}  // namespace

Listener::Listener(ConnectionHooks hooks, ConnectionOptions options, int threads)
    : hooks_(std::move(hooks)), options_(options), threads_(std::max(1, threads)) {}

Listener::~Listener() {
  stop();
  for (auto& worker : workers_)
    if (worker.joinable()) worker.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

int Listener::bind(const std::string& host, int port, std::string& problem) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    problem = gai_strerror(rc);
    return -1;
  }
  problem = "no usable address";
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second server bind a port one already serves.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      break;
    }
    problem = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return -1;
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                           : reinterpret_cast<sockaddr_in&>(bound).sin_port);
}

void Listener::run() {
  if (listen_fd_ < 0) return;
  for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { serve_next(); });
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(kSlice.count())) <= 0) continue;
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // out of descriptors: let some close
      continue;
    }
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // SSE events go out as they are written
    auto connection = std::make_shared<Connection>();
    connection->fd = fd;
    connection->peer = peer_address(address);
    std::lock_guard lock(mutex_);
    if (waiting_.size() >= static_cast<size_t>(threads_)) {
      (void)!::send(fd, busy_answer().data(), busy_answer().size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    waiting_.push_back(connection);
    make_room(connection->peer);
    wake_.notify_one();
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  {
    std::lock_guard lock(mutex_);
    accepting_done_ = true;
    for (auto& connection : served_) connection->dropped = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

void Listener::stop() { stopping_.store(true); }

void Listener::make_room(const std::string& peer) {
  const auto holds_without_answering = [](const std::shared_ptr<Connection>& c) {
    return c->phase != ByteStream::Phase::Answering && !c->dropped.load();
  };
  const auto drop_longest = [&](auto&& eligible) {
    std::shared_ptr<Connection> victim;
    for (auto& c : served_)
      if (holds_without_answering(c) && eligible(*c) && (!victim || c->since < victim->since)) victim = c;
    if (victim) victim->dropped = true;
  };
  const size_t busy = served_.size();
  if (!waiting_.empty() && busy >= static_cast<size_t>(threads_)) drop_longest([](const Connection&) { return true; });
  const size_t per_peer = static_cast<size_t>(std::max(1, threads_ - threads_ / 4));
  const size_t held = std::count_if(served_.begin(), served_.end(), [&](const std::shared_ptr<Connection>& c) {
    return c->peer == peer && holds_without_answering(c);
  });
  if (held >= per_peer) drop_longest([&](const Connection& c) { return c.peer == peer; });
}

void Listener::serve_next() {
  for (;;) {
    std::shared_ptr<Connection> connection;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return !waiting_.empty() || accepting_done_; });
      if (waiting_.empty()) return;
      connection = waiting_.front();
      waiting_.pop_front();
      connection->since = Clock::now();
      served_.push_back(connection);
    }
    try {
      SocketStream stream(*connection, *this);
      serve_connection(stream, hooks_, options_);
    } catch (const std::exception&) {
      // (out of memory, say): this connection is lost, the server is not
    }
    std::lock_guard lock(mutex_);
    served_.remove(connection);
    ::close(connection->fd);
  }
}

}  // namespace splash::server::http
