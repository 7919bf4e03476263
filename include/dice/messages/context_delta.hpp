#pragma once

#include "dice/core/role.hpp"
#include "dice/messages/payload.hpp"

#include "caf/meta/type_name.hpp"
#include "caf/optional.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dice {

/// What one node tells its peers about its context after an iteration
/// (DI-engine's ContextExchanger payload, typed). Counters travel as
/// increments so a receiver can sum several senders.
struct context_delta {
  /// Node id of the sender.
  std::uint32_t sender = 0;
  /// Incarnation of the sender (changes when a node restarts).
  std::uint64_t incarnation = 0;
  /// Per-sender sequence number, 1 for the first delta of an incarnation.
  std::uint64_t seq = 0;
  /// Lowest seq of this (sender, incarnation) the sender holds unacknowledged
  /// when it sends (1 <= base <= seq): every seq below it is settled, so a
  /// receiver new to the stream starts it here instead of at whatever seq
  /// reaches it first (protocol v3). 0 says nothing (the stream is taken to
  /// start at `seq`); dice's exchangers always set it.
  std::uint64_t base = 0;
  /// Roles of the sender when it sent this delta.
  role_set sender_roles;
  /// env_step increment since the previous delta (collectors only).
  caf::optional<std::int64_t> env_step;
  /// env_episode increment since the previous delta (collectors only).
  caf::optional<std::int64_t> env_episode;
  /// Absolute train_iter (learners only).
  caf::optional<std::int64_t> train_iter;
  /// Trajectories produced this iteration (collectors only).
  std::vector<payload> trajectories;
  /// Episodes produced this iteration (collectors only).
  std::vector<payload> episodes;
  /// Ends of trajectories, as indices into this delta's flattened items.
  std::vector<std::int64_t> trajectory_end_idx;
  /// True when trajectory_end_idx was sent (collectors always send it).
  bool has_trajectory_end_idx = false;
  /// Version of the model that produced the data (-1: none).
  std::int64_t model_version = -1;
};

/// Field-wise equality.
bool operator==(const context_delta& x, const context_delta& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, context_delta& x) {
  return f(caf::meta::type_name("dice::context_delta"), x.sender, x.incarnation,
           x.seq, x.base, x.sender_roles, x.env_step, x.env_episode,
           x.train_iter, x.trajectories, x.episodes, x.trajectory_end_idx,
           x.has_trajectory_end_idx, x.model_version);
}

/// True when the delta carries no field at all (DI-engine skips the emit).
bool empty(const context_delta& x);

/// Bytes of the trajectory and episode payloads `x` carries.
std::size_t payload_bytes(const context_delta& x);

/// Largest seq (and base) a delta may carry: far beyond any run, and low
/// enough that a receiver's `seq + 1` can never wrap.
inline constexpr std::uint64_t max_delta_seq = std::uint64_t{1} << 62;

/// Why the sequence fields of `x` (from the wire) cannot be right, or
/// nullptr when they are consistent: seq <= max_delta_seq and base <= seq
/// (base 0 for an unsequenced delta).
const char* sequence_error(const context_delta& x);

} // namespace dice
