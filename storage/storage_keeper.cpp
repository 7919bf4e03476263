// The TTL keeper: removes stored items once they expire.
#include "dice/storage/storage.hpp"

namespace dice {

storage_keeper::~storage_keeper() {
  clear();
}

std::size_t storage_keeper::sweep(time_point now) {
  // Items are added in completion order, so expiries are sorted.
  std::size_t n = 0;
  while (n < items_.size() && items_[n].first <= now) {
    remove_storage(items_[n].second);
    ++n;
  }
  items_.erase(items_.begin(), items_.begin() + static_cast<long>(n));
  return n;
}

void storage_keeper::clear() {
  for (auto& item : items_)
    remove_storage(item.second);
  items_.clear();
}

} // namespace dice
