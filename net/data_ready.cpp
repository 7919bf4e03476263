// The inbox's shared halves (net/data_inbox.hpp): a link's budget of
// received bytes not yet claimed, and the table of whole transfers nobody
// claimed yet, which the router takes from without a message.
#include "data_inbox.hpp"

#include <algorithm>
#include <vector>

namespace dice::net {

bool data_budget::acquire(std::uint64_t n) {
  std::unique_lock<std::mutex> guard{mtx_};
  cv_.wait(guard, [&] {
    return closed_ || used_ + n <= cap_;
  });
  if (closed_)
    return false;
  used_ += n;
  return true;
}

void data_budget::release(std::uint64_t n) {
  std::lock_guard<std::mutex> guard{mtx_};
  used_ -= std::min(n, used_);
  cv_.notify_all();
}

void data_budget::close() {
  std::lock_guard<std::mutex> guard{mtx_};
  closed_ = true;
  cv_.notify_all();
}

std::uint64_t data_budget::used() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return used_;
}

void data_ready_table::put(std::uint32_t peer, std::uint64_t id,
                           shared_bytes bytes,
                           std::shared_ptr<data_budget> budget) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ready_.emplace(std::make_pair(peer, id),
                   entry{std::move(bytes), std::move(budget)});
  }
  put_.notify_all();
}

bool data_ready_table::wait(std::uint32_t peer, std::uint64_t id,
                            caf::timespan timeout) {
  std::unique_lock<std::mutex> guard{mtx_};
  return put_.wait_for(guard, timeout, [&] {
    return ready_.count(std::make_pair(peer, id)) > 0;
  });
}

std::optional<shared_bytes> data_ready_table::take(std::uint32_t peer,
                                                   std::uint64_t id) {
  entry x;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = ready_.find(std::make_pair(peer, id));
    if (i == ready_.end())
      return std::nullopt;
    x = std::move(i->second);
    ready_.erase(i);
  }
  x.budget->release(x.bytes.size());
  return std::move(x.bytes);
}

void data_ready_table::drop(std::uint32_t peer) {
  std::vector<entry> dropped;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = ready_.lower_bound(std::make_pair(peer, std::uint64_t{0}));
    while (i != ready_.end() && i->first.first == peer) {
      dropped.push_back(std::move(i->second));
      i = ready_.erase(i);
    }
  }
  for (auto& x : dropped)
    x.budget->release(x.bytes.size());
}

} // namespace dice::net
