#include "dice/logging/sampler.hpp"

namespace dice::log {

std::uint64_t sampler::next(const std::string& key) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = counts_.find(key);
  if (i == counts_.end()) {
    if (counts_.size() >= max_keys_)
      i = counts_.emplace("*", 0).first;
    else
      i = counts_.emplace(key, 0).first;
  }
  auto n = ++i->second;
  return n % every_ == 1 || every_ == 1 ? n : 0;
}

std::string sampled_note(std::uint64_t n, std::uint64_t every) {
  if (n <= 1)
    return {};
  return " (" + std::to_string(n) + " such; every " + std::to_string(every)
    + "th is logged)";
}

std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') // "[::1]:4242"
    return address.substr(0, address.find(']') + 1);
  auto colon = address.rfind(':');
  if (colon == std::string::npos || address.find(':') != colon)
    return address; // no port, or a bare IPv6 address
  return address.substr(0, colon);
}

} // namespace dice::log
