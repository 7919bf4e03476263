#pragma once

#include "dice/messages/model_snapshot.hpp"

#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dice {

/// A model snapshot whose bytes come by relay (actors/router_relay.cpp):
/// the origin sends this to each receiver directly over BASP, in its own
/// name; the bytes travel on data connections down a tree of members, and
/// the receiver delivers them only if their SHA-256 equals `digest`.
struct relay_reference {
  /// Topic of the snapshot.
  std::string topic;
  /// The publishing node (the origin, which sends this reference).
  std::uint32_t sender = 0;
  /// The origin's relay round (nonzero): the tag of the bytes' first piece.
  std::uint32_t round = 0;
  /// The bytes travel as this many pieces, tagged `round` ..
  /// `round + pieces - 1`, so a relay forwards one piece while it receives
  /// the next (a pipeline down the tree).
  std::uint32_t pieces = 1;
  /// SHA-256 of the snapshot's bytes (32 raw bytes), computed once by the
  /// origin.
  std::string digest;
  /// Who sends the bytes to the receiver: a member, or the origin itself.
  std::uint32_t upstream = 0;
  /// Members the receiver forwards the bytes to.
  std::vector<std::uint32_t> children;
  /// The snapshot without its bytes.
  model_snapshot header;
};

/// Serializes a relay_reference.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, relay_reference& x) {
  return f(caf::meta::type_name("dice::relay_reference"), x.topic, x.sender,
           x.round, x.pieces, x.digest, x.upstream, x.children, x.header);
}

} // namespace dice
