#pragma once

// Internal: a learner of a group's deltas that arrived before an earlier one
// of their stream (see docs/architecture.md, walk (c), "In order, in a
// group"). They wait here, unapplied and unacked, until the gap fills.

#include "dice/messages/context_delta.hpp"

#include "applied_deltas.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace dice::detail {

/// Early deltas per stream, bounded (a collector's window bounds what an
/// honest one sends; more is refused and comes again later).
class early_deltas {
 public:
  /// Identifies a stream: (sender node, sender incarnation).
  using key = applied_deltas::key;

  /// Most deltas held per stream.
  static constexpr std::size_t max_per_stream = 64;

  /// Most deltas held in all.
  static constexpr std::size_t max_total = 1024;

  /// What `hold` did with a delta.
  enum class outcome { held, duplicate, full };

  /// Keeps `d` until its stream reaches it.
  outcome hold(const context_delta& d) {
    auto& h = streams_[key{d.sender, d.incarnation}];
    if (h.count(d.seq) > 0)
      return outcome::duplicate;
    if (h.size() >= max_per_stream || total_ >= max_total)
      return outcome::full;
    h.emplace(d.seq, d);
    ++total_;
    return outcome::held;
  }

  /// Hands `apply` the held deltas of `k` that come next after what
  /// `applied` settled, in order, until one is missing or `apply` returns
  /// false (it stays held). Drops what is settled meanwhile (counted by
  /// another learner, or given up by its sender) and what `drop` says.
  template <class Drop, class Apply>
  void drain(const key& k, const applied_deltas& applied, Drop drop,
             Apply apply) {
    auto i = streams_.find(k);
    if (i == streams_.end())
      return;
    auto& h = i->second;
    while (!h.empty()) {
      auto j = h.begin();
      if (j->first <= applied.upto(k) || drop(j->second)) {
        h.erase(j);
        --total_;
        continue;
      }
      if (j->first != applied.upto(k) + 1 || !apply(j->second))
        break;
      h.erase(j);
      --total_;
    }
    if (h.empty())
      streams_.erase(i);
  }

  /// Streams with held deltas.
  std::vector<key> streams() const {
    std::vector<key> result;
    for (auto& kvp : streams_)
      result.push_back(kvp.first);
    return result;
  }

 private:
  std::map<key, std::map<std::uint64_t, context_delta>> streams_;
  std::size_t total_ = 0;
};

} // namespace dice::detail
