#pragma once

#include "dice/messages/finish.hpp"
#include "dice/role.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/deserializer.hpp"
#include "caf/message.hpp"
#include "caf/meta/type_name.hpp"
#include "caf/sec.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dice {

/// Most backlog messages a hello may carry (a hold keeps at most 1024 per
/// topic; more is a hostile or broken peer).
inline constexpr std::size_t max_hello_backlog = 1 << 16;

/// Version of the bus-to-bus protocol; peers with another version are
/// refused at the handshake. 3: every connection starts with dice's
/// preamble (net/preamble.hpp) before CAF's BASP, and context deltas carry
/// `base`.
inline constexpr std::uint32_t bus_protocol_version = 3;

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
  /// With a cluster secret: the attacher's answer to the acceptor's
  /// challenge (see dice/auth.hpp); empty otherwise.
  std::string proof;
  /// Messages for the receiver, each `(topic, sender node, message)`.
  std::vector<caf::message> backlog;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_hello& x) {
  return f(caf::meta::type_name("dice::peer_hello"), x.version, x.node, x.roles,
           x.topics, x.finished, x.drained, x.proof, x.backlog);
}

/// Reads a hello from an untrusted peer: same format, but the backlog's
/// length is checked first. CAF 0.17 decodes a truncated caf::message as an
/// empty one without consuming input, so a bare count of 2^40 would
/// otherwise make it build 2^40 empty messages (found by message_fuzz).
inline caf::error inspect(caf::deserializer& f, peer_hello& x) {
  if (auto err = f(caf::meta::type_name("dice::peer_hello"), x.version, x.node,
                   x.roles, x.topics, x.finished, x.drained, x.proof))
    return err;
  std::size_t n = 0;
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > max_hello_backlog)
    return caf::sec::invalid_argument;
  if (auto bin = dynamic_cast<caf::binary_deserializer*>(&f))
    if (n > bin->remaining())
      return caf::sec::end_of_stream;
  x.backlog.clear();
  for (std::size_t i = 0; i < n; ++i) {
    caf::message m;
    if (auto err = f(m))
      return err;
    // dice never sends an empty backlog entry: this one is a truncation.
    if (m.empty())
      return caf::sec::end_of_stream;
    x.backlog.push_back(std::move(m));
  }
  return f.end_sequence();
}

} // namespace dice
