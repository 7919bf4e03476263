#pragma once

#include "dice/core/role.hpp"

#include "caf/meta/type_name.hpp"

#include <cstdint>

namespace dice {

/// What a router tells its members (never a peer) when a peer node finished
/// its handshake (`up`) or was lost: e.g. a collector resends its
/// unacknowledged context at once when a learner (re)connects instead of
/// waiting for its resend timer.
struct peer_event {
  /// Node id of the peer.
  std::uint32_t node = 0;
  /// Roles the peer announced in its handshake.
  role_set roles;
  /// True: connected; false: lost.
  bool up = false;
};

/// Field-wise equality.
inline bool operator==(const peer_event& x, const peer_event& y) {
  return x.node == y.node && x.roles == y.roles && x.up == y.up;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_event& x) {
  return f(caf::meta::type_name("dice::peer_event"), x.node, x.roles, x.up);
}

} // namespace dice
