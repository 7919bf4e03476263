#pragma once

// Which repeats of a log line are written. A peer that repeats what dice
// refuses (a malformed bind, a forged hello, garbage context) is refused
// every time and counted every time, but only the first refusal of each
// kind from each peer and every 1024th after it reach the log: a secret
// holder sending thousands must not flood it (4,000 lines, 354 KB, before).

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace dice::log {

/// Counts occurrences per key (a kind of refusal and a peer) and says which
/// to log: the 1st, the 1025th, the 2049th, ... Thread-safe. Keeps at most
/// `max_keys` keys; beyond them all new keys share one count, so a flood of
/// addresses cannot grow it without bound.
class sampler {
 public:
  /// Every `every`th occurrence of a key is logged, starting with the first.
  explicit sampler(std::uint64_t every = 1024, std::size_t max_keys = 4096)
    : every_(every), max_keys_(max_keys) {}

  /// The occurrence's number when it is to be logged (1, 1025, ...), else 0.
  std::uint64_t next(const std::string& key);

 private:
  std::uint64_t every_;
  std::size_t max_keys_;
  std::mutex mtx_;
  std::unordered_map<std::string, std::uint64_t> counts_;
};

/// What a sampled line ends with: nothing for the first occurrence, else
/// " (N such; every 1024th is logged)".
std::string sampled_note(std::uint64_t n, std::uint64_t every = 1024);

/// The host of "host:port" (the whole string without a port): sampling by
/// peer must not count each new source port apart.
std::string host_of(const std::string& address);

} // namespace dice::log
