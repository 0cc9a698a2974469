#pragma once
// A 64-byte aligned, zero-initialised byte buffer: the packed weights and scratch tensors
// live in these so that every 512-bit load is aligned.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace splash::kernels {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) { resize(bytes); }

  void resize(size_t bytes) {
    if (bytes <= capacity_) {
      size_ = bytes;
      return;
    }
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* memory = std::aligned_alloc(64, rounded);
    if (!memory) throw std::bad_alloc();
    std::memset(memory, 0, rounded);
    data_.reset(static_cast<uint8_t*>(memory));
    size_ = bytes;
    capacity_ = rounded;
  }

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data_.get()); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_.get()); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace splash::kernels

namespace splash::kernels {

// Page-aligned memory that reads as zeros and becomes resident only where written (an
// anonymous mapping): the KV block pool reserves its whole planned size up front, but a
// server that has only served short prompts keeps only their pages.
class LazyMemory {
 public:
  LazyMemory() = default;
  explicit LazyMemory(size_t bytes);
  ~LazyMemory();
  LazyMemory(const LazyMemory&) = delete;
  LazyMemory& operator=(const LazyMemory&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace splash::kernels
