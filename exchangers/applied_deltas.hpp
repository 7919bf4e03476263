#pragma once

// Internal: which deltas of each (sender, incarnation) stream a receiver
// applied, for exactly-once context (see docs/trust.md).

#include "dice/messages/context_delta.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace dice::detail {

/// The seqs a receiver applied per (sender, incarnation). Every seq up to
/// `upto` is settled (applied here, or below the sender's `base`); seqs past a
/// gap are kept in `above` until the gap fills, so a resend that fills it is
/// applied, not mistaken for a duplicate. Bounded: a peer inventing
/// incarnations only evicts old streams, and a gap keeps at most `max_above`
/// seqs.
class applied_deltas {
 public:
  /// Identifies a stream: (sender node, sender incarnation).
  using key = std::pair<std::uint32_t, std::uint64_t>;

  /// Most streams remembered.
  static constexpr std::size_t max_streams = 4096;

  /// Most seqs remembered past a gap per stream.
  static constexpr std::size_t max_above = 4096;

  /// What `note` found out about a stream.
  struct contact {
    /// This was the first delta of the stream seen here.
    bool first = false;
    /// Seqs below this were settled before this receiver heard of it.
    std::uint64_t base = 0;
  };

  /// Takes `d.base` into account before `d` is checked or applied: a new
  /// stream starts at `base` (not at whatever seq arrived first: a new
  /// delta may overtake resends of older ones), and a known stream whose
  /// sender gave up on seqs below `base` stops waiting for them. Call only
  /// with a delta whose sequence_error() is null.
  contact note(const context_delta& d) {
    contact result;
    if (d.seq == 0)
      return result;
    // A delta without a base (never sent by v3 peers) says nothing about
    // older seqs: treat the stream as starting at its own seq.
    auto base = d.base == 0 ? d.seq : d.base;
    auto k = key{d.sender, d.incarnation};
    auto i = streams_.find(k);
    if (i == streams_.end()) {
      if (streams_.size() >= max_streams)
        streams_.erase(streams_.begin());
      i = streams_.emplace(k, stream{}).first;
      result.first = true;
      result.base = base;
    }
    auto& s = i->second;
    if (base - 1 > s.upto) {
      s.upto = base - 1;
      s.above.erase(s.above.begin(), s.above.upper_bound(s.upto));
      collapse(s);
    }
    return result;
  }

  /// True if `d` was applied before (seq 0 marks an unsequenced delta).
  bool duplicate(const context_delta& d) const {
    if (d.seq == 0)
      return false;
    auto i = streams_.find({d.sender, d.incarnation});
    return i != streams_.end()
      && (d.seq <= i->second.upto || i->second.above.count(d.seq) > 0);
  }

  /// Records that `d` was applied.
  void mark(const context_delta& d) {
    if (d.seq == 0)
      return;
    auto& s = streams_[key{d.sender, d.incarnation}];
    if (d.seq <= s.upto)
      return;
    if (s.above.size() >= max_above)
      s.above.erase(s.above.begin());
    s.above.insert(d.seq);
    collapse(s);
  }

  /// Settles every seq of stream `k` up to `upto` (e.g. counted by
  /// another learner of a group before this one took the stream over).
  void settle(const key& k, std::uint64_t upto) {
    auto& s = streams_[k];
    if (upto <= s.upto)
      return;
    s.upto = upto;
    s.above.erase(s.above.begin(), s.above.upper_bound(s.upto));
    collapse(s);
  }

  /// Every seq of the stream up to this is settled here (0: none or
  /// unknown): what a cumulative ack says.
  std::uint64_t upto(const key& k) const {
    auto i = streams_.find(k);
    return i == streams_.end() ? 0 : i->second.upto;
  }

 private:
  struct stream {
    std::uint64_t upto = 0;
    std::set<std::uint64_t> above;
  };

  // seq <= max_delta_seq: upto + 1 never wraps.
  static void collapse(stream& s) {
    while (!s.above.empty() && *s.above.begin() <= s.upto + 1) {
      s.upto = std::max(s.upto, *s.above.begin());
      s.above.erase(s.above.begin());
    }
  }

  std::map<key, stream> streams_;
};

} // namespace dice::detail
