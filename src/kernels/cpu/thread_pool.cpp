#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <chrono>

#include "common/error.h"

namespace splash::kernels {
namespace {
constexpr uint64_t kFieldMask = (uint64_t{1} << 20) - 1;
constexpr int kMaxTasks = static_cast<int>(kFieldMask);
}  // namespace

int ThreadPool::default_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = default_threads();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_claimed_tasks(uint64_t job) {
  uint64_t word = claim_.load(std::memory_order_acquire);
  while (true) {
    const uint64_t tasks = (word >> 20) & kFieldMask, next = word & kFieldMask;
    if ((word >> 40) != job || next >= tasks) return;
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Holding an unfinished task of `job` keeps the dispatcher from starting the next job,
    // so fn_ and context_ are still this job's.
    fn_(context_, static_cast<int>(next));
    done_.fetch_add(1, std::memory_order_release);
    word = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::dispatch(int tasks, TaskFn fn, void* context) {
  if (tasks > kMaxTasks) fail("thread pool: {} tasks in one job is more than {}", tasks, kMaxTasks);
  fn_ = fn;
  context_ = context;
  done_.store(0, std::memory_order_relaxed);
  job_ = (job_ + 1) & ((uint64_t{1} << 24) - 1);
  claim_.store((job_ << 40) | (static_cast<uint64_t>(tasks) << 20), std::memory_order_release);
  // seq_cst pairs with the worker's sleepers_ increment: either it sees the new wake_
  // value before sleeping, or we see it counted and pay for the futex wake.
  wake_.fetch_add(1);
  if (sleepers_.load() > 0) wake_.notify_all();
  run_claimed_tasks(job_);
  // Every task is claimed; wait for the ones other threads are still running.
  for (int spins = 0; done_.load(std::memory_order_acquire) < tasks; ++spins) {
    if (spins < 4096) _mm_pause();
    else sched_yield();  // a worker holding a task was descheduled: give it the core
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = wake_.load(std::memory_order_acquire);
  while (!stop_.load(std::memory_order_acquire)) {
    const uint64_t word = claim_.load(std::memory_order_acquire);
    run_claimed_tasks(word >> 40);
    // Spin for a short while (the next parallel region of a forward pass is microseconds
    // away), then sleep until the next job so an idle server uses no CPU.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    int spins = 0;
    while (wake_.load(std::memory_order_acquire) == seen) {
      _mm_pause();
      if ((++spins & 63) == 0 && std::chrono::steady_clock::now() > spin_until) {
        sleepers_.fetch_add(1);
        wake_.wait(seen);
        sleepers_.fetch_sub(1);
        break;
      }
    }
    seen = wake_.load(std::memory_order_acquire);
  }
}

}  // namespace splash::kernels
