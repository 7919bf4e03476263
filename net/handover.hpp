#pragma once

// Handing a connection that finished dice's preamble to CAF's BASP broker
// (CAF 0.17.6, read in libcaf_io/src/io/basp_broker.cpp and
// middleman_actor_impl.cpp):
// - `multiplexer::new_scribe(fd)` only wraps the socket; the scribe joins
//   the multiplexer's loop when the broker adds it, so any thread may
//   create it (CAF's own middleman actor does, from its own thread).
// - The broker takes `(publish_atom, scribe_ptr, port, whom, sigs)`: it adds
//   the scribe, registers `whom` as published on `port` (an idempotent map
//   entry; no doorman, so nothing else to clean up) and writes the server
//   handshake; and `(connect_atom, scribe_ptr, port)`: it adds the scribe,
//   writes the client handshake and answers (node_id, actor, interface)
//   once the server's handshake arrived, as `remote_actor` does.
// - Any local actor may send these; strangers cannot (the broker is not in
//   the registry of names a remote node can address, and a scribe does not
//   serialize).

#include "dice/process/unique_fd.hpp"
#include "net/basp_guard.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/io/scribe.hpp"

#include <cstdint>
#include <set>
#include <string>

namespace dice::net {

/// The middleman's BASP broker (created with the middleman).
caf::actor basp_broker_of(caf::actor_system& sys);

/// What a scribe lets through to BASP, and whose logs it writes.
struct scribe_limits {
  /// The node's id (for log lines).
  std::uint32_t node = 0;
  /// Largest BASP payload a peer may announce (net/basp_guard.hpp).
  std::uint32_t max_basp_payload = default_max_basp_payload;
};

/// Wraps `fd` as a scribe of `sys`'s middleman, which owns it from then
/// on (closed here if that fails): plain TCP, or TLS through CAF's openssl
/// session (`accepting`: the server side of the TLS handshake). The TLS
/// handshake runs in the multiplexer once the broker reads. Either way every
/// BASP frame passes a `basp_guard` before CAF reads it.
caf::expected<caf::io::scribe_ptr> make_scribe(caf::actor_system& sys,
                                               unique_fd fd, bool tls,
                                               bool accepting,
                                               scribe_limits limits = {});

/// Gives an accepted connection to BASP as a connection to `whom`,
/// published on `port` with interface `sigs`.
void serve_basp(const caf::actor& basp, caf::io::scribe_ptr scribe,
                std::uint16_t port, const caf::actor& whom,
                std::set<std::string> sigs);

} // namespace dice::net
