#pragma once
// Measures this machine's sustained memory read bandwidth with all pool threads, the
// ceiling against which decode speed (bytes of weights read per token) is judged.
#include <cstddef>

#include "kernels/cpu/thread_pool.h"

namespace splash::kernels {

// Bytes per second, best of `repetitions` passes over a buffer far larger than the caches.
double measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes = size_t{1} << 30, int repetitions = 5);

}  // namespace splash::kernels
