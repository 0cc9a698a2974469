#include "kernels/cpu/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"

namespace splash::kernels {

double measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes, int repetitions) {
  AlignedBuffer buffer(buffer_bytes);
  const size_t words = buffer_bytes / sizeof(uint64_t);
  auto* data = buffer.as<uint64_t>();
  const int tasks = pool.size();
  // Touch every page first (and from the threads that will read it) so page faults are not timed.
  pool.run(tasks, [&](int task) {
    for (size_t i = words * task / tasks; i < words * (task + 1) / tasks; ++i) data[i] = i;
  });
  std::atomic<uint64_t> sink{0};
  double best = 0.0;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.run(tasks, [&](int task) {
      uint64_t a = 0, b = 0, c = 0, d = 0;  // independent chains keep loads in flight
      const size_t end = words * (task + 1) / tasks;
      for (size_t i = words * task / tasks; i + 4 <= end; i += 4) {
        a += data[i];
        b += data[i + 1];
        c += data[i + 2];
        d += data[i + 3];
      }
      sink.fetch_add(a + b + c + d, std::memory_order_relaxed);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(buffer_bytes) / seconds);
  }
  return sink.load() == 42 ? best + 1e-9 : best;  // keeps the reads from being optimised away
}

}  // namespace splash::kernels
