#pragma once

#include "dice/core/role.hpp"
#include "dice/messages/finish.hpp"

#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dice {

/// Version of the router-to-router protocol; peers with another version are
/// refused at the handshake. 3: every connection starts with dice's
/// preamble (net/preamble.hpp) before CAF's BASP, and context deltas carry
/// `base`. 4: peers talk to each other's gate only; the hello carries no
/// backlog (it follows as ordinary, chunked forwards just before the
/// answer); a node id that is still connected is answered `retry_later`.
/// 5: the data plane (a `data` field in the hello, channel 2 on the port,
/// snapshot references on BASP; net/data_plane.hpp). 6: the hello's `data`
/// is an X25519 key exchange, data connections prove the control session
/// (net/data_auth.hpp) and run TLS when TLS is on. 7: acks are their own
/// message (context_ack, from learners only) and any other registered type
/// travels on a topic inside an `event` (messages/event.hpp); a learner
/// group's text is such an event. 8: relay broadcast (a `relay_reference`
/// from the origin, `(relay, round, node, ok)` back to it, and a relay
/// round's tag in the data plane's transfer header). 9: forwards that
/// queued for a peer while its router was busy travel as one
/// `(forward, forward_batch)`, and same-host segments are recycled and
/// sealed against resizing only (net/data_shm.hpp; magic `DICESHM2`, the
/// tag is checked again after the copy). 10: a relay round's bytes travel
/// in pieces (`relay_reference::pieces`, one tag each) that relays forward
/// as they arrive, and an origin in auto relay mode asks receivers to echo
/// `(relay, round, node, true)` after a direct send. 11: routers of a
/// node with a secret skip their challenge (the preamble proved the secret
/// on the connection; `router_config::preamble_proven`). 12: a data-plane
/// transfer's checksum follows its bytes (a trailer, net/data_wire.hpp),
/// so the writer hashes each piece as it sends it. 13: a same-host segment
/// may be longer than its header and bytes (a snapshot shared from the
/// memfd it was built in, `writable_bytes::shareable`). 14: a data-plane
/// snapshot's header and BASP order travel in a header frame before its
/// bytes (net/data_wire.hpp), the receiver routes it on arrival, and its
/// BASP reference waits for the next message to the peer.
inline constexpr std::uint32_t router_protocol_version = 14;

/// The handshake between two nodes: who the node is, what it listens to,
/// and whether its run is over.
struct peer_hello {
  /// Must equal `router_protocol_version`.
  std::uint32_t version = router_protocol_version;
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
  /// With a cluster secret: the attacher's answer to the acceptor's
  /// challenge (see dice/security/auth.hpp); empty otherwise.
  std::string proof;
  /// The data plane: in the attacher's hello its ephemeral X25519 public
  /// key if it can open data connections; in the acceptor's answer the
  /// acceptor's (empty: none, snapshots stay on BASP). See
  /// net/data_auth.hpp.
  std::string data;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_hello& x) {
  return f(caf::meta::type_name("dice::peer_hello"), x.version, x.node, x.roles,
           x.topics, x.finished, x.drained, x.proof, x.data);
}

} // namespace dice
