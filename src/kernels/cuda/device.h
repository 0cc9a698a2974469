#pragma once
// The GPU as the host sees it: which device there is, device and pinned host memory owned
// by RAII buffers, one stream a model's work is queued on. No CUDA type appears here, so
// plain C++ (the model layer) includes it; every failing CUDA call becomes splash::Error
// with the call named.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace splash::kernels::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;           // "NVIDIA H200"
  int major = 0, minor = 0;   // compute capability
  int multiprocessors = 0;
  size_t total_bytes = 0;     // device memory
  size_t free_bytes = 0;      // free now (cudaMemGetInfo)
  int driver_version = 0;     // e.g. 13000
  int runtime_version = 0;
  std::string summary() const;  // "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0)"
};

// The first visible GPU, or nullopt (and why, in *why) when there is none: no driver, no
// device, or a device this build has no code for.
std::optional<DeviceInfo> find_device(std::string* why = nullptr);

// The current device's multiprocessors (asked once; at least 1): how kernels size their grids.
int multiprocessor_count();

// "12.3 GiB"
std::string gib(size_t bytes);

// Throws splash::Error "<what>: <CUDA's message>" if the last launch or an earlier
// asynchronous operation failed.
void check_last_error(const char* what);

// Device memory from cudaMalloc (never managed memory). Grows only; contents are not kept.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { resize(bytes); }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), size_(other.size_) { other.data_ = nullptr, other.size_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void resize(size_t bytes);  // at least `bytes`; reallocates (contents lost) only to grow
  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory: the staging area of asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void resize(size_t bytes);
  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

class Stream;

// Work recorded from a stream once and replayed with a single launch (a CUDA graph): a
// decode step's few hundred kernels cost the host one call instead of one each, and the GPU
// runs them without waiting on the host between them.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch(Stream& stream) const;  // asynchronous
  explicit operator bool() const { return exec_ != nullptr; }

 private:
  friend class Stream;
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// A stream and the cuBLAS handle bound to it: all of one model's work runs in order here.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return stream_; }  // cudaStream_t
  void* blas() const { return blas_; }      // cublasHandle_t
  void synchronize(const char* what);       // waits; throws splash::Error on a device error
  void copy_to_device(void* device, const void* host, size_t bytes);    // asynchronous
  void copy_to_host(void* host, const void* device, size_t bytes);      // asynchronous
  void copy_on_device(void* to, const void* from, size_t bytes);        // asynchronous
  void fill(void* device, int byte, size_t bytes);                      // asynchronous memset
  // Records instead of running, from begin_capture to end_capture (which returns the work as
  // a graph) or abort_capture (after a failure while recording: the stream runs again).
  void begin_capture();
  Graph end_capture();
  void abort_capture() noexcept;

 private:
  void* stream_ = nullptr;
  void* blas_ = nullptr;
};

// Where a stream's time goes, step by step: mark(stream, name) after each step of a pass
// records an event; collect() (after the stream is synchronized) adds each interval since
// the previous mark to its step's total. Events between kernels end their overlap, so the
// totals are the serialized cost of each step, launch gaps included (a profile, not a
// benchmark: SPLASH_CUDA_PROFILE=1).
class Timeline {
 public:
  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  void mark(Stream& stream, const char* name);  // name: a string literal
  void collect();
  std::string report() const;  // one line a step: total ms, calls, us a call, share

 private:
  struct Step {
    const char* name;
    double ms = 0.0;
    long calls = 0;
  };
  std::vector<std::pair<void*, const char*>> marks_;  // (cudaEvent_t, step ending there), this pass
  std::vector<void*> spare_;                         // events to reuse
  std::vector<Step> steps_;
  long passes_ = 0;
};

// Device-to-device copy bandwidth in bytes per second (bytes read plus bytes written over
// the time of a large copy): the ceiling memory-bound kernels are measured against.
double measure_copy_bandwidth();

}  // namespace splash::kernels::cuda
