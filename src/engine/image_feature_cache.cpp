#include "engine/image_feature_cache.h"

namespace splash::engine {

std::optional<vision::ImageFeatures> ImageFeatureCache::find(uint64_t digest, size_t file_bytes) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find({digest, file_bytes});
  if (it == index_.end()) {
    ++counters_.misses;
    return std::nullopt;
  }
  ++counters_.hits;
  entries_.splice(entries_.begin(), entries_, it->second);
  return it->second->features;
}

void ImageFeatureCache::store(uint64_t digest, size_t file_bytes, const vision::ImageFeatures& features) {
  const size_t size = bytes_of(features);
  if (size > budget_) return;  // larger than the whole cache: not kept
  std::lock_guard lock(mutex_);
  const Key key{digest, file_bytes};
  if (index_.contains(key)) return;
  while (!entries_.empty() && counters_.bytes + size > budget_) {
    counters_.bytes -= bytes_of(entries_.back().features);
    index_.erase(entries_.back().key);
    entries_.pop_back();
  }
  entries_.push_front({key, features});
  index_[key] = entries_.begin();
  counters_.bytes += size;
  counters_.images = entries_.size();
}

ImageFeatureCacheCounters ImageFeatureCache::counters() const {
  std::lock_guard lock(mutex_);
  ImageFeatureCacheCounters out = counters_;
  out.images = entries_.size();
  return out;
}

}  // namespace splash::engine
