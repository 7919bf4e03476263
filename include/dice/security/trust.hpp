#pragma once

#include <cstdint>
#include <string>

namespace dice {

/// Kinds of hostile or broken input a node refused. Each has a process-wide
/// counter, so tests and reports can check that a rejection was seen (and
/// not silently swallowed) without threading counters through every actor.
enum class trust_event : std::uint8_t {
  /// A payload (Boost archive) failed to decode or was inconsistent.
  payload_rejected,
  /// A model snapshot failed `validate()`.
  snapshot_rejected,
  /// A message from a peer was mistyped (unexpected content for its topic).
  message_rejected,
  /// A peer forwarded a message on a topic this node never subscribed to.
  unknown_topic,
  /// A peer spoke another protocol version.
  wrong_version,
  /// A peer failed the cluster-secret challenge (wrong or no secret).
  auth_refused,
  /// A remote actor tried to kill a published actor.
  remote_exit_ignored,
  /// A message exceeded a size limit.
  oversize,
  /// A configuration value was refused.
  config_rejected,
  /// A duplicate context delta was dropped (exactly-once delivery).
  duplicate_dropped,
  /// A connection's first bytes were not dice's preamble (or another
  /// preamble version): closed before CAF saw a byte.
  preamble_rejected,
  /// A connection did not finish the preamble in time: closed.
  preamble_timeout,
  /// A connection still in the preamble was closed to make room for a new
  /// one (the listener's cap on pending connections).
  pending_evicted,
  /// A message without a sender was dropped: every message a dice actor
  /// accepts names its sender (CAF cannot tell a remote anonymous message
  /// from a local one).
  anonymous_dropped,
  /// A message from an actor that may not send it was dropped: a remote
  /// actor that is no authenticated peer, a remote actor sending local
  /// control (join, publish, attach, finish...), or a sender CAF resolved
  /// from this node's registry (which a remote node can name).
  stranger_dropped,
  /// An authenticated peer's message named another node as its sender or
  /// origin (peers never relay: a forward comes from its publisher).
  forged_origin,
  /// A connection past the preamble sent a BASP frame header that CAF 0.17
  /// would crash on or that announced more than dice.max-basp-payload: the
  /// connection was closed before CAF read it (net/basp_guard.hpp).
  frame_rejected,
};

/// Number of trust_event kinds.
inline constexpr std::size_t trust_event_count = 17;

/// The enumerator's name, e.g. "auth_refused".
const char* to_string(trust_event x) noexcept;

/// Adds one to the counter of `x` (thread-safe).
void count(trust_event x) noexcept;

/// Current value of the counter of `x`.
std::uint64_t counter(trust_event x) noexcept;

/// All counters as one JSON object, e.g. {"auth_refused":2,...}.
std::string trust_counters_json();

} // namespace dice
