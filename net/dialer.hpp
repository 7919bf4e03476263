#pragma once

#include "net/basp_guard.hpp"
#include "net/preamble.hpp"
#include "net/socket.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace dice::net {

/// Settings of a node's dialer.
struct dialer_config {
  /// The node's id (for log lines).
  std::uint32_t node = 0;
  /// Cluster secret (empty: none).
  std::string secret;
  /// Start TLS (CAF's openssl session) after the preamble.
  bool tls = false;
  /// Deadline of one attempt: connect, preamble and BASP handshake.
  caf::timespan connect_timeout = std::chrono::seconds{2};
  /// Largest BASP payload the peer may announce (net/basp_guard.hpp).
  std::uint32_t max_basp_payload = default_max_basp_payload;
};

/// Connects to `host`:`port` and runs dice's preamble for channel `ch`
/// before `deadline`; the (non-blocking) socket is left at the channel's
/// first byte. Failures of the secret are counted
/// (`trust_event::auth_refused`). `binding`, if given, receives the
/// preamble's nonces (preamble_dialer::binding).
caf::expected<unique_fd> dial_channel(const std::string& secret,
                                      const std::string& host,
                                      std::uint16_t port, channel ch,
                                      deadline_clock::time_point deadline,
                                      std::string* binding = nullptr);

/// Spawns a node's dialer: it answers `(connect_atom, host, port)` like
/// CAF's middleman actor does, with `(node_id, strong_actor_ptr,
/// std::set<std::string>)` or an error, but connects raw, runs dice's
/// preamble (net/preamble.hpp) and only then hands the socket to BASP.
/// Each attempt runs in a worker of its own (a detached actor, kept for the
/// next attempt once done), bounded by `connect_timeout`, so a slow or
/// silent peer blocks neither the asking actor nor other attempts. To a
/// numeric address the dialer itself starts the connection and sends the
/// hello, while the worker's thread wakes up. Failures of the secret or the
/// version are logged as errors and counted (`trust_event::auth_refused`).
caf::actor spawn_dialer(caf::actor_system& sys, dialer_config cfg);

} // namespace dice::net
