#pragma once

// What PPO collectors send and how a learner cuts it back into segments.
// Torch-free.
//
// One payload holds steps, and its `count` is its number of steps, so the
// items a context exchanger counts are steps and `trajectory_end_idx`
// indexes steps, exactly as in DI-engine (a list of transitions plus the
// index of the last transition of each trajectory). A collector iteration
// yields one payload of T steps x N envs laid out env by env, with end
// indices T-1, 2T-1, ..., NT-1, stamped with the model version that acted
// (see segment_builder.hpp), and one payload of the episodes that finished.
//
// Steps travel column-wise (`step_columns`) for any observation size and
// either action kind: each column is one block of bytes in a Boost binary
// archive (pack_steps / unpack_steps). dice's bounded archive reads every
// column only after checking that its claimed length fits in the bytes
// left, so a forged count cannot allocate more than the bytes that arrived.
// The archive holds one step_columns, not a vector of items: read it with
// unpack_steps, not dice::unpack. Byte order is the host's, as for tensors.

#include "dice/env/space.hpp"
#include "dice/messages/payload.hpp"
#include "dice/rl/intake.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <boost/serialization/binary_object.hpp>
#include <boost/serialization/collection_size_type.hpp>
#include <boost/serialization/level.hpp>
#include <boost/serialization/nvp.hpp>
#include <boost/serialization/tracking.hpp>
#include <boost/serialization/vector.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dice::rl {

/// The shape of one step: observation floats and the kind of action.
struct step_layout {
  /// Floats per observation.
  std::int64_t obs_dim = 0;
  /// Discrete(n): n (actions are indices 0..n-1); 0 for Box actions.
  std::int64_t num_actions = 0;
  /// Box: floats per action; 0 for Discrete actions.
  std::int64_t act_dim = 0;

  /// True for Discrete actions.
  bool discrete() const noexcept {
    return num_actions > 0;
  }

  /// The layout for these spaces (observation: Box, flattened; action:
  /// Discrete or Box), or errc::invalid_config.
  static caf::expected<step_layout> of(const space& observation_space,
                                       const space& action_space);

  /// Boost.Serialization: the three numbers.
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& obs_dim& num_actions& act_dim;
  }
};

/// Same numbers.
inline bool operator==(const step_layout& x, const step_layout& y) {
  return x.obs_dim == y.obs_dim && x.num_actions == y.num_actions
    && x.act_dim == y.act_dim;
}

/// Not equal.
inline bool operator!=(const step_layout& x, const step_layout& y) {
  return !(x == y);
}

/// "obs 4, Discrete(2)" or "obs 3, Box(1)".
std::string to_string(const step_layout& x);

/// Environment steps column by column (DI-engine's transition dict with
/// obs, action, reward, next_obs, done, logp and value): row i of every
/// column is step i.
struct step_columns {
  /// Observation size and action kind of every row.
  step_layout layout;
  /// Reward of each step [n].
  std::vector<float> reward;
  /// log pi(a|x) of the behaviour policy (the model version that acted)
  /// [n]; a log-density for Box actions, so it may be positive there.
  std::vector<float> logp;
  /// The behaviour policy's V(obs) [n] (valid where has_value is 1).
  std::vector<float> value;
  /// 1: the episode terminated at this step (no bootstrap) [n].
  std::vector<std::uint8_t> terminated;
  /// 1: the episode hit its time limit (bootstrap from next_obs) [n].
  std::vector<std::uint8_t> truncated;
  /// 1: `value` was sent [n].
  std::vector<std::uint8_t> has_value;
  /// Discrete: the action index of each step [n]; empty for Box.
  std::vector<std::int64_t> discrete_actions;
  /// Box: the action as sampled (before any clipping to the bounds)
  /// [n * act_dim]; empty for Discrete.
  std::vector<float> box_actions;
  /// Observation the action was taken in [n * obs_dim].
  std::vector<float> obs;
  /// Observation after the step, before any auto-reset (the bootstrap
  /// state at a time limit or at the end of a segment) [n * obs_dim].
  std::vector<float> next_obs;

  /// Steps (rows).
  std::size_t size() const noexcept {
    return reward.size();
  }

  /// True without steps.
  bool empty() const noexcept {
    return reward.empty();
  }

  /// Appends rows [first, first + count) of `src` (same layout).
  void append(const step_columns& src, std::size_t first, std::size_t count);

  /// Boost.Serialization: the layout, then each column as one block.
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    // next_obs last: a forged count there is what the hostile-input tests
    // aim at (any column is checked the same way).
    ar& layout& reward& logp& value& terminated& truncated& has_value;
    ar& discrete_actions& box_actions& obs& next_obs;
  }
};

/// Why `x` is not what a collector sends ("" if it is): a usable layout,
/// columns of consistent lengths, finite numbers, logp <= 0 for Discrete
/// actions, action indices below n, flags 0 or 1.
std::string check(const step_columns& x);

/// `x` as a payload of x.size() items from `origin`, acted by
/// `model_version`.
dice::payload pack_steps(const step_columns& x, std::uint32_t origin = 0,
                         std::int64_t model_version = -1);

/// Reads what pack_steps wrote and checks it (see check): corrupt,
/// truncated or inconsistent bytes, a count that differs from the rows, or
/// rows that fail check give errc::malformed_input (counted as
/// trust_event::payload_rejected, as dice::unpack does).
caf::expected<step_columns> unpack_steps(const dice::payload& x);

/// One finished episode as it travels in `ctx.episodes` (dice::pack /
/// dice::unpack of a std::vector<episode_record>).
struct episode_record {
  /// Undiscounted return.
  double ret;
  /// Steps of the episode.
  std::int64_t length;

  /// Boost.Serialization of a single record: its bytes (vectors of
  /// records go as one block, see below).
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& boost::serialization::make_binary_object(this, sizeof(*this));
  }
};

static_assert(sizeof(episode_record) == 16,
              "episode_record must have no padding");
static_assert(std::is_trivially_copyable<episode_record>::value,
              "episode_record travels as raw bytes");

/// Checks one episode record: finite return, length >= 1. Returns a reason
/// or "".
std::string check(const episode_record& x);

/// Steps cut into segments, ready for return computation.
struct segment_batch {
  /// Kept steps, in the order received.
  step_columns steps;
  /// 1 at the last step of each kept segment.
  std::vector<std::uint8_t> segment_end;
  /// Behaviour model version of each kept step.
  std::vector<std::int64_t> version;
  /// Lag of each kept step.
  std::vector<std::int64_t> lag;
  /// Kept segments.
  std::int64_t segments = 0;

  /// Kept steps.
  std::size_t size() const noexcept {
    return steps.size();
  }
};

/// How a learner admits data.
struct intake_options {
  /// The learner's model version now (what lag is measured against).
  std::int64_t learner_version = 0;
  /// Drop segments whose lag exceeds this many versions (-1: keep all).
  std::int64_t max_lag = -1;
  /// The layout the learner trains on; payloads of another layout are
  /// refused. All zero: the first payload that checks out sets it.
  step_layout layout;
};

/// Cuts a learner's merged context into segments: `trajectories` as the
/// context exchanger merged them (several collectors' payloads
/// concatenated) and `end_idx` indexing their flattened steps. The indices
/// must be strictly increasing, inside the list, end with the last step and
/// include every payload's last step (a segment never spans two payloads);
/// otherwise the whole batch is refused with errc::malformed_input (e.g.
/// DI-engine's un-offset indices of two or more collectors). A payload that
/// does not decode, check out or match the layout is dropped with its
/// segments, the others are kept. Lag = learner_version - max(payload
/// version, 0) per step, recorded in `lags`; segments beyond max_lag are
/// dropped and counted.
caf::expected<segment_batch>
cut_segments(const std::vector<dice::payload>& trajectories,
             const std::vector<std::int64_t>& end_idx,
             const intake_options& opts, intake_counters& counters,
             lag_summary& lags);

/// Trajectory flags for return computation: 1 where a trajectory ends
/// (segment end, termination or truncation), as DI-engine's gae_estimator
/// builds `traj_flag`.
std::vector<std::uint8_t> trajectory_flags(const segment_batch& b);

/// DI-engine's gae_estimator flags, for comparison: `done` (terminated or
/// truncated) of `steps`, then 1 at every index in `end_idx` that lies in
/// range, with no check of order or coverage.
std::vector<std::uint8_t>
dingengine_flags(const step_columns& steps,
                 const std::vector<std::int64_t>& end_idx);

/// Appends one collector's context to a learner's, as the context exchanger
/// merges deltas: payloads concatenated, end indices offset by the steps
/// merged before (`offset` false: DI-engine's merge, indices unchanged).
void merge_context(std::vector<dice::payload>& trajectories,
                   std::vector<std::int64_t>& end_idx,
                   const std::vector<dice::payload>& more,
                   const std::vector<std::int64_t>& more_end_idx,
                   bool offset = true);

} // namespace dice::rl

namespace dice::rl::detail {

/// Writes a vector of records: the element count, then all bytes at once.
template <class Archive, class T>
void save_records(Archive& ar, const std::vector<T>& xs) {
  const boost::serialization::collection_size_type count(xs.size());
  ar << BOOST_SERIALIZATION_NVP(count);
  if (!xs.empty())
    ar.save_binary(xs.data(), xs.size() * sizeof(T));
}

/// Reads what save_records wrote, 64 KiB at a time: memory grows with the
/// bytes actually read, whatever the count claims (truncated input throws
/// at the first chunk past the end).
template <class Archive, class T>
void load_records(Archive& ar, std::vector<T>& xs) {
  boost::serialization::collection_size_type count;
  ar >> BOOST_SERIALIZATION_NVP(count);
  constexpr std::size_t chunk = (std::size_t{64} << 10) / sizeof(T);
  std::vector<T> out;
  std::size_t left = count;
  while (left > 0) {
    auto n = std::min(left, chunk);
    auto old = out.size();
    out.resize(old + n);
    ar.load_binary(out.data() + old, n * sizeof(T));
    left -= n;
  }
  xs = std::move(out);
}

} // namespace dice::rl::detail

// More specialized than Boost's std::vector save/load, so they replace them
// for episodes (found through the version argument's namespace).
namespace boost::serialization {

/// Episodes: count, then one block of bytes.
template <class Archive>
void save(Archive& ar, const std::vector<dice::rl::episode_record>& xs,
          const unsigned int) {
  dice::rl::detail::save_records(ar, xs);
}

/// Episodes: read in bounded chunks.
template <class Archive>
void load(Archive& ar, std::vector<dice::rl::episode_record>& xs,
          const unsigned int) {
  dice::rl::detail::load_records(ar, xs);
}

} // namespace boost::serialization

// Values: no tracking, no class information in the archive.
BOOST_CLASS_IMPLEMENTATION(dice::rl::step_layout,
                           boost::serialization::object_serializable)
BOOST_CLASS_TRACKING(dice::rl::step_layout, boost::serialization::track_never)
BOOST_CLASS_IMPLEMENTATION(dice::rl::step_columns,
                           boost::serialization::object_serializable)
BOOST_CLASS_TRACKING(dice::rl::step_columns, boost::serialization::track_never)
BOOST_CLASS_IMPLEMENTATION(dice::rl::episode_record,
                           boost::serialization::object_serializable)
BOOST_CLASS_TRACKING(dice::rl::episode_record,
                     boost::serialization::track_never)
