#pragma once

// The data plane's process-wide counters (every plane of the process counts
// in the same ones): bytes and transfers each way, refusals, torn and
// oversize transfers, same-host segments, relay rounds and arrivals routed
// without their BASP reference. Tests, benchmarks and reports read them
// through `data_stats()`.

#include "caf/timespan.hpp"

#include <cstdint>

namespace dice::net {

/// Process-wide counters of every data plane, as plain values
/// (`basic_data_counters<std::uint64_t>`, what tests and reports read) or as
/// the atomics the planes' threads count in.
template <class T>
struct basic_data_counters {
  /// Bytes written / read as transfer bodies.
  T bytes_sent{};
  T bytes_received{};
  /// Transfers written / received whole.
  T transfers_sent{};
  T transfers_received{};
  /// Snapshots that went over BASP although a data plane was on.
  T fallbacks{};
  /// Data connections refused (no session, bad proof, malformed bind,
  /// failed TLS handshake).
  T refused{};
  /// Transfers dropped: cut short, bad checksum, malformed frame.
  T torn{};
  /// Announces above `max_transfer_bytes`.
  T oversize{};
  /// Data connections opened (both ends count).
  T links_opened{};
  /// Transfers sent / received as same-host references (a subset of
  /// transfers_sent / transfers_received).
  T shm_sent{};
  T shm_received{};
  /// Same-host segments this process wrote and holds now, for a peer that
  /// has not released them or for a queued item (closed, or pooled, on the
  /// peer's release or its loss).
  T segments_open{};
  /// Released segments kept open for the next snapshot of their size (at
  /// most 2 a process; a lost peer's segment is closed, never pooled).
  T segments_pooled{};
  /// Snapshots written into a pooled segment (no page allocation).
  T shm_reused{};
  /// Snapshots shared straight from the memfd they were built in
  /// (`writable_bytes::shareable`): no copy into a segment.
  T shm_borrowed{};
  /// Relay broadcast (actors/router_relay.cpp): rounds an origin started,
  /// transfers a member forwarded for an origin, transfers an origin sent
  /// directly because a relay path failed (peer lost, a receiver's
  /// complaint, the deadline), and relayed bytes a receiver dropped because
  /// their SHA-256 did not match the origin's reference.
  T relay_rounds{};
  T relay_forwarded{};
  T relay_fallbacks{};
  T relay_mismatches{};
  /// Snapshots a router routed when their bytes and header arrived, without
  /// waiting for their BASP reference (net/data_wire.hpp, "header").
  T routed_on_arrival{};
};

/// What `data_stats()` returns.
using data_counters = basic_data_counters<std::uint64_t>;

/// Current values of the process-wide counters.
data_counters data_stats() noexcept;

/// Which relay counter `count_relay` bumps.
enum class relay_counter { round, forwarded, fallback, mismatch };

/// Counts a snapshot routed on arrival (`routed_on_arrival`).
void count_routed_on_arrival() noexcept;

/// Counts one relay event in the process-wide counters.
void count_relay(relay_counter which) noexcept;

/// Waits up to `timeout` until this process holds none of its own same-host
/// segments (a writer may still be closing one just after its peer is
/// lost); true if none is left.
bool wait_segments_closed(caf::timespan timeout);

} // namespace dice::net
