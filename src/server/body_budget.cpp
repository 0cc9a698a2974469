#include "server/body_budget.h"

namespace splash::server {

bool BodyBudget::try_acquire(size_t bytes) {
  size_t used = used_.load();
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) {
      refused_.fetch_add(1);
      return false;
    }
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}

void BodyBudget::release(size_t bytes) { used_.fetch_sub(bytes); }

}  // namespace splash::server
