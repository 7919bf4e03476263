#pragma once

#include "dice/messages/finish.hpp"
#include "dice/role.hpp"

#include "caf/message.hpp"
#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dice {

/// Version of the bus-to-bus protocol; peers with another version are
/// refused at the handshake.
inline constexpr std::uint32_t bus_protocol_version = 1;

/// The handshake between two node buses: who the node is, what it listens
/// to, and whether its run is over. The acceptor's answer also carries the
/// backlog for the new peer (held and retained messages on its topics), so
/// the peer has them before its role actor starts.
struct peer_hello {
  /// Must equal `bus_protocol_version`.
  std::uint32_t version = bus_protocol_version;
  /// Node id of the sender.
  std::uint32_t node = 0;
  /// Roles of the sender.
  role_set roles;
  /// Topics the sender's members subscribed to.
  std::vector<std::string> topics;
  /// The finish the sender knows of, if its run is over (0 or 1 element).
  std::vector<finish> finished;
  /// Every member of the sender is done (it publishes nothing more).
  bool drained = false;
  /// Messages for the receiver, each `(topic, sender node, message)`.
  std::vector<caf::message> backlog;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_hello& x) {
  return f(caf::meta::type_name("dice::peer_hello"), x.version, x.node, x.roles,
           x.topics, x.finished, x.drained, x.backlog);
}

} // namespace dice
