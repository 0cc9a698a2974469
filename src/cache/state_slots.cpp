#include "cache/state_slots.h"

#include "common/error.h"

namespace splash::cache {

StateSlots::StateSlots(int slots) : total_(slots), held_(slots > 0 ? slots : 0, false) {
  for (int slot = slots - 1; slot >= 0; --slot) free_.push_back(slot);  // slot 0 handed out first
}

int StateSlots::acquire() {
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  held_[slot] = true;
  return slot;
}

void StateSlots::release(int slot) {
  if (slot < 0 || slot >= total_ || !held_[slot]) fail("state slot {} released but not held", slot);
  held_[slot] = false;
  free_.push_back(slot);
}

}  // namespace splash::cache
