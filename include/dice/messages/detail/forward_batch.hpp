#pragma once

#include "caf/message.hpp"
#include "caf/meta/type_name.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dice {

/// Most forwards in one forward_batch: a sender flushes at this many, a
/// receiver refuses a batch with more (protocol v9).
inline constexpr std::size_t max_forward_batch = 256;

/// One publish a router forwards to a peer: what `(forward_atom, topic,
/// sender, message)` carries on its own.
struct forwarded {
  /// The topic.
  std::string topic;
  /// The node that published it.
  std::uint32_t sender = 0;
  /// The published `(topic, value)` message.
  caf::message msg;
};

/// Serializes a forwarded message.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forwarded& x) {
  return f(caf::meta::type_name("dice::forwarded"), x.topic, x.sender, x.msg);
}

/// Forwards that queued for one peer while its router was busy, sent as one
/// BASP message (actors/router_routing.cpp, "Coalescing"): a link under load
/// pays BASP's per-message cost once per batch, an idle one not at all.
struct forward_batch {
  /// In the order they were published.
  std::vector<forwarded> items;
};

/// Serializes a forward_batch.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forward_batch& x) {
  return f(caf::meta::type_name("dice::forward_batch"), x.items);
}

} // namespace dice
