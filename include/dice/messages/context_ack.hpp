#pragma once

#include "caf/meta/type_name.hpp"

#include <cstdint>

namespace dice {

/// A learner's cumulative acknowledgement of one collector's context deltas
/// (protocol v7; before, acks were context_deltas whose seq meant "up to"):
/// every delta of `collector`'s incarnation `incarnation` up to `upto` is
/// applied (or settled) at node `sender`. Published on
/// `context_ack_topic(collector)`; only learners send it (a router refuses
/// one from a peer that is no learner).
struct context_ack {
  /// The learner that acknowledges.
  std::uint32_t sender = 0;
  /// The collector whose deltas are acknowledged.
  std::uint32_t collector = 0;
  /// The collector's incarnation the seqs belong to.
  std::uint64_t incarnation = 0;
  /// Every seq up to this one is settled.
  std::uint64_t upto = 0;
};

/// Field-wise equality.
inline bool operator==(const context_ack& x, const context_ack& y) {
  return x.sender == y.sender && x.collector == y.collector
    && x.incarnation == y.incarnation && x.upto == y.upto;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, context_ack& x) {
  return f(caf::meta::type_name("dice::context_ack"), x.sender, x.collector,
           x.incarnation, x.upto);
}

} // namespace dice
