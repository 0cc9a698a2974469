#pragma once
// A persistent pool: worker threads are created once and spin briefly between jobs, because
// a decode step issues ~150 small parallel regions and waking sleeping threads each time
// would cost more than the work. The calling thread takes part in every job and never
// waits for a worker that has not started: tasks are claimed from a shared counter, so on
// a busy machine (a descheduled worker) the caller simply runs the remaining tasks itself.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace splash::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; <= 0 means all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task) for every task in [0, tasks), spread over the threads; returns when all ran.
  template <typename Fn>
  void run(int tasks, Fn&& fn) {
    if (tasks <= 0) return;
    if (tasks == 1 || workers_.empty()) {
      for (int t = 0; t < tasks; ++t) fn(t);
      return;
    }
    auto trampoline = [](void* context, int task) { (*static_cast<std::remove_reference_t<Fn>*>(context))(task); };
    dispatch(tasks, trampoline, &fn);
  }

  static int default_threads();

 private:
  using TaskFn = void (*)(void*, int);
  void dispatch(int tasks, TaskFn fn, void* context);
  void worker_loop();
  void run_claimed_tasks(uint64_t job);

  std::vector<std::thread> workers_;
  // (job << 40) | (task count << 20) | next unclaimed task: one word, so a claim made with a
  // compare-and-swap can never take a task of a job other than the one it read.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<uint32_t> wake_{0};  // bumped per job; idle workers sleep on it
  std::atomic<int> sleepers_{0};               // workers inside wake_.wait(): only then notify
  uint64_t job_ = 0;  // owned by the dispatching thread
  TaskFn fn_ = nullptr;
  void* context_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace splash::kernels
