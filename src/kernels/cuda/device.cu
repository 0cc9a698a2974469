#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <vector>

#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device.h"

namespace splash::kernels::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    cuda_fail(std::string(what) + ": " + cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
}

}  // namespace

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / 1073741824.0);
  return text;
}

std::string DeviceInfo::summary() const {
  return name + " (sm_" + std::to_string(major) + std::to_string(minor) + ", " + std::to_string(multiprocessors) +
         " SMs, " + gib(total_bytes) + ", driver " + std::to_string(driver_version / 1000) + "." +
         std::to_string(driver_version % 1000 / 10) + ")";
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
    return std::max(value, 1);
  }();
  return count;
}

std::optional<DeviceInfo> find_device(std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<DeviceInfo> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    cudaGetLastError();  // clear it: not having a GPU is no error of later calls
    return refuse(std::string("no usable CUDA driver or device (") + cudaGetErrorString(status) + ")");
  }
  if (count == 0) return refuse("no CUDA device is visible");
  DeviceInfo info;
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  info.index = 0;
  info.name = props.name;
  info.major = props.major;
  info.minor = props.minor;
  info.multiprocessors = props.multiProcessorCount;
  if (info.major < 8)
    return refuse(info.name + " has compute capability " + std::to_string(info.major) + "." +
                  std::to_string(info.minor) + "; the CUDA backend needs 8.0 or newer");
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

void check_last_error(const char* what) { check(cudaGetLastError(), what); }

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::resize(size_t bytes) {
  if (bytes <= size_) return;
  if (data_) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
  if (const cudaError_t status = cudaMalloc(&data_, bytes); status != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    cuda_fail("out of GPU memory: " + gib(bytes) + " asked for, " + gib(free) + " free of " + gib(total) + " (" +
              cudaGetErrorString(status) + ")");
  }
  size_ = bytes;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

void PinnedBuffer::resize(size_t bytes) {
  if (bytes <= size_) return;
  if (data_) cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
  check(cudaMallocHost(&data_, bytes), "cudaMallocHost");
  size_ = bytes;
}

Stream::Stream() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    cuda_fail("cublasCreate failed (is libcublas of CUDA 13 installed?)");
  }
  cublasSetStream(blas, stream);
  blas_ = blas;
}

Stream::~Stream() {
  if (blas_) cublasDestroy(static_cast<cublasHandle_t>(blas_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Stream::synchronize(const char* what) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), what);
  check(cudaGetLastError(), what);
}

void Stream::copy_to_device(void* device, const void* host, size_t bytes) {
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)),
        "copy to the GPU");
}

void Stream::copy_to_host(void* host, const void* device, size_t bytes) {
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)),
        "copy from the GPU");
}

void Stream::copy_on_device(void* to, const void* from, size_t bytes) {
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_)),
        "copy on the GPU");
}

void Stream::fill(void* device, int byte, size_t bytes) {
  check(cudaMemsetAsync(device, byte, bytes, static_cast<cudaStream_t>(stream_)), "cudaMemset");
}

void Stream::begin_capture() {
  check(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream_), cudaStreamCaptureModeThreadLocal),
        "recording a CUDA graph");
}

Graph Stream::end_capture() {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &graph), "recording a CUDA graph");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(status, "instantiating a CUDA graph");
  Graph result;
  result.exec_ = exec;
  return result;
}

void Stream::abort_capture() noexcept {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's error is the caller's to report
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

void Graph::launch(Stream& stream) const {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream.handle())),
        "launching a CUDA graph");
}

Timeline::~Timeline() {
  for (auto& [event, name] : marks_) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  for (void* event : spare_) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void Timeline::mark(Stream& stream, const char* name) {
  cudaEvent_t event = nullptr;
  if (!spare_.empty()) {
    event = static_cast<cudaEvent_t>(spare_.back());
    spare_.pop_back();
  } else {
    check(cudaEventCreate(&event), "cudaEventCreate");
  }
  check(cudaEventRecord(event, static_cast<cudaStream_t>(stream.handle())), "cudaEventRecord");
  marks_.emplace_back(event, name);
}

void Timeline::collect() {
  for (size_t i = 1; i < marks_.size(); ++i) {
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(marks_[i - 1].first),
                               static_cast<cudaEvent_t>(marks_[i].first)),
          "cudaEventElapsedTime");
    const char* name = marks_[i].second;
    auto step = std::find_if(steps_.begin(), steps_.end(), [&](const Step& s) { return std::strcmp(s.name, name) == 0; });
    if (step == steps_.end()) step = steps_.insert(steps_.end(), Step{name});
    step->ms += ms;
    ++step->calls;
  }
  for (auto& [event, name] : marks_) spare_.push_back(event);
  marks_.clear();
  ++passes_;
}

std::string Timeline::report() const {
  double total = 0.0;
  for (const Step& s : steps_) total += s.ms;
  char head[96];
  std::snprintf(head, sizeof(head), "GPU time by step over %ld passes (%.3f ms a pass):\n", passes_,
                total / static_cast<double>(std::max(passes_, 1L)));
  std::string out = head;
  std::vector<Step> sorted = steps_;
  std::sort(sorted.begin(), sorted.end(), [](const Step& a, const Step& b) { return a.ms > b.ms; });
  for (const Step& s : sorted) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-22s %10.3f ms %8ld calls %9.2f us/call %5.1f%%\n", s.name, s.ms, s.calls,
                  1000.0 * s.ms / static_cast<double>(std::max(s.calls, 1L)), total > 0 ? 100.0 * s.ms / total : 0.0);
    out += line;
  }
  return out;
}

double measure_copy_bandwidth() {
  const size_t bytes = size_t{1} << 30;  // 1 GiB each way: far past the 50 MB L2
  DeviceBuffer from(bytes), to(bytes);
  check(cudaMemset(from.data(), 1, bytes), "cudaMemset");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < 7; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 1) times.push_back(ms);  // the first two warm up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  check_last_error("measuring the copy bandwidth");
  std::sort(times.begin(), times.end());
  return 2.0 * bytes / (times[times.size() / 2] * 1e-3);
}

}  // namespace splash::kernels::cuda
