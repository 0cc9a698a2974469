#pragma once
// Accepts connections and serves each on a thread of a fixed pool (serve_connection). A
// connection holds its thread while idle between requests, while reading one and while
// answering (a stream holds it for minutes), so the pool is guarded against clients that
// hold threads without sending: when a connection waits for a thread and none is free, or
// when one client address holds more than three quarters of the pool in idle or reading
// connections, the connection that has idled or read longest is dropped (one being answered
// never is). stop() stops accepting, drops idle and reading connections at once and lets
// answers end; run() returns when every connection has closed.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http/connection.h"

namespace splash::server::http {

class Listener {
 public:
  Listener(ConnectionHooks hooks, ConnectionOptions options, int threads);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds host:port (0: any free port); the bound port, or -1 with `problem` said.
  int bind(const std::string& host, int port, std::string& problem);
  void run();
  void stop();  // safe from any thread, a signal handler's thread included

  struct Connection;  // one accepted socket (listener.cpp)

 private:
  class SocketStream;  // a Connection's bytes, with the pool's view of it
  void serve_next();
  void make_room(const std::string& peer);  // with mutex_ held

  ConnectionHooks hooks_;
  ConnectionOptions options_;
  int threads_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Connection>> waiting_;  // accepted, no thread yet
  std::list<std::shared_ptr<Connection>> served_;    // on a thread
  bool accepting_done_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace splash::server::http
