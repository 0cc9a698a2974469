#pragma once
// A hybrid model's recurrent-state slots (model.h: ModelInfo::state_slots): the cache
// layer's bookkeeping of which are free. A running sequence holds one from admission to its
// end or preemption; the state itself lives in the model, like the KV blocks' contents.
// Slots are not shared and not kept after their sequence: a prefix hit resumes from a
// snapshot (state_snapshots.h) copied into the new sequence's slot.
#include <cstdint>
#include <vector>

namespace splash::cache {

class StateSlots {
 public:
  explicit StateSlots(int slots);  // 0: a model without recurrent state (every acquire gives -1)

  // A free slot, or -1 when every slot is held.
  int acquire();
  void release(int slot);  // a slot acquire() gave out and not yet released

  int total() const { return total_; }
  int available() const { return static_cast<int>(free_.size()); }

 private:
  int total_;
  std::vector<int32_t> free_;
  std::vector<bool> held_;
};

}  // namespace splash::cache
