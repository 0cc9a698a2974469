#pragma once
// Encoded images kept by content. Agents resend the whole conversation every turn, old
// screenshots included; encoding one is seconds of work (up to 17 encoder passes), so an image
// file seen recently is answered from here, before it is even decoded. Least recently used
// images leave first once the byte budget is reached. Thread-safe (requests are encoded on
// their HTTP threads).
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "vision/vision_encoder.h"

namespace splash::engine {

struct ImageFeatureCacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  size_t images = 0;
  size_t bytes = 0;
};

class ImageFeatureCache {
 public:
  // A 1280 x 800 screenshot of SmolVLM-256M is ~1.9 MB of features: 64 MiB keeps ~30.
  static constexpr size_t kDefaultBytes = size_t{64} << 20;

  explicit ImageFeatureCache(size_t budget_bytes = kDefaultBytes) : budget_(budget_bytes) {}

  // The features of the file with this digest and size, if kept (a copy).
  std::optional<vision::ImageFeatures> find(uint64_t digest, size_t file_bytes);
  void store(uint64_t digest, size_t file_bytes, const vision::ImageFeatures& features);
  ImageFeatureCacheCounters counters() const;

 private:
  struct Key {
    uint64_t digest;
    size_t file_bytes;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.digest ^ (k.file_bytes * 0x9e3779b97f4a7c15ull)); }
  };
  struct Entry {
    Key key;
    vision::ImageFeatures features;
  };
  static size_t bytes_of(const vision::ImageFeatures& f) { return f.values.size() * sizeof(float); }

  size_t budget_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  ImageFeatureCacheCounters counters_;
};

}  // namespace splash::engine
