#pragma once

// What PPO collectors send and how a learner cuts it back into segments.
// Torch-free.
//
// One payload item is one environment step (`step_record`), so the items a
// context exchanger counts are steps and `trajectory_end_idx` indexes steps,
// exactly as in DI-engine (a list of transitions plus the index of the last
// transition of each trajectory). A collector iteration yields one payload of
// T steps x N envs laid out env by env, with end indices T-1, 2T-1, ...,
// NT-1, stamped with the model version that acted, and one payload of the
// episodes that finished (`episode_record`). Both records are plain 48- and
// 16-byte structs without padding: a vector of them is written as its count
// and then ONE block of bytes, never field by field, and read back in
// bounded chunks, so a forged count cannot allocate more than the bytes that
// actually arrived (Boost's own vector loader would resize to the count
// first: 48 bytes per byte of input). Byte order is the host's, as for
// tensors.

#include "dice/messages/payload.hpp"

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

namespace ppo {

/// Length of a CartPole observation.
constexpr std::size_t obs_dim = 4;

/// Number of CartPole actions.
constexpr std::size_t num_actions = 2;

/// One environment step as it travels (DI-engine's transition dict with
/// obs, action, reward, next_obs, done, logit/logp and value).
struct step_record {
  /// Observation the action was taken in.
  float obs[obs_dim];
  /// Observation after the step, before any auto-reset (the bootstrap
  /// state at a time limit or at the end of a segment).
  float next_obs[obs_dim];
  /// Reward of the step.
  float reward;
  /// Log-probability of `action` under the behaviour policy (the model
  /// version that acted).
  float logp;
  /// The behaviour policy's value estimate of `obs` (valid if `has_value`).
  float value;
  /// Action taken.
  std::uint8_t action;
  /// 1: the episode terminated (no bootstrap).
  std::uint8_t terminated;
  /// 1: the episode hit its time limit (bootstrap from next_obs).
  std::uint8_t truncated;
  /// 1: `value` was sent.
  std::uint8_t has_value;

  /// Boost.Serialization of a single record: its bytes (vectors of records
  /// go as one block, see save_records).
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& boost::serialization::make_binary_object(this, sizeof(*this));
  }
};

static_assert(sizeof(step_record) == 48, "step_record must have no padding");
static_assert(std::is_trivially_copyable<step_record>::value,
              "step_record travels as raw bytes");

/// One finished episode as it travels in `ctx.episodes`.
struct episode_record {
  /// Undiscounted return.
  double ret;
  /// Steps of the episode.
  std::int64_t length;

  /// Boost.Serialization of a single record (see step_record).
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& boost::serialization::make_binary_object(this, sizeof(*this));
  }
};

static_assert(sizeof(episode_record) == 16,
              "episode_record must have no padding");

/// Checks one record read from the wire: finite numbers, logp <= 0, an
/// action below `num_actions`, flags 0 or 1. Returns a reason or "".
std::string check(const step_record& x);

/// Checks one episode record: finite return, length >= 1. Returns a reason
/// or "".
std::string check(const episode_record& x);

/// Policy lag (learner version minus behaviour version) of every sample a
/// learner received, as a histogram.
class lag_summary {
 public:
  /// Lags from this value up share the last bucket.
  static constexpr std::int64_t buckets = 64;

  /// Records `n` samples of lag `lag` (>= 0).
  void add(std::int64_t lag, std::int64_t n = 1);

  /// Adds every sample of `other`.
  void merge(const lag_summary& other);

  /// Samples recorded.
  std::int64_t count() const noexcept {
    return count_;
  }

  /// Smallest lag (0 if none).
  std::int64_t min() const noexcept {
    return count_ > 0 ? min_ : 0;
  }

  /// Largest lag (0 if none).
  std::int64_t max() const noexcept {
    return max_;
  }

  /// Mean lag (NaN if none).
  double mean() const noexcept;

  /// Smallest lag with at least `q` of the samples at or below it (lags
  /// past the last bucket report as `buckets`).
  std::int64_t quantile(double q) const noexcept;

  /// Samples with lag k (the last entry: lag >= buckets - 1).
  const std::vector<std::int64_t>& histogram() const noexcept {
    return hist_;
  }

  /// "min/mean/max, p50, p90" in one line.
  std::string str() const;

 private:
  std::vector<std::int64_t> hist_ = std::vector<std::int64_t>(buckets, 0);
  std::int64_t count_ = 0;
  std::int64_t min_ = 0;
  std::int64_t max_ = 0;
  double sum_ = 0;
};

/// What the learner did with the samples it received (cumulative).
struct intake_counters {
  /// Steps in payloads that decoded and checked out.
  std::int64_t steps_received = 0;
  /// Segments (end index to end index) in them.
  std::int64_t segments_received = 0;
  /// Steps dropped because their lag exceeded max_lag.
  std::int64_t steps_dropped_stale = 0;
  /// Segments dropped because their lag exceeded max_lag.
  std::int64_t segments_dropped_stale = 0;
  /// Steps dropped because their payload claims a model version newer than
  /// the learner's (forged, or from before a learner restart).
  std::int64_t steps_dropped_future = 0;
  /// Payloads refused (undecodable or failing `check`), and their steps.
  std::int64_t payloads_rejected = 0;
  /// Steps in refused payloads (as they claimed).
  std::int64_t steps_rejected = 0;
  /// Merged batches refused whole (trajectory_end_idx inconsistent).
  std::int64_t batches_rejected = 0;
  /// Why the last payload or batch was refused.
  std::string last_error;
};

/// Steps cut into segments, ready for return computation.
struct segment_batch {
  /// Kept steps, in the order received.
  std::vector<step_record> steps;
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
};

/// Cuts a learner's merged context into segments: `trajectories` as the
/// context exchanger merged them (several collectors' payloads
/// concatenated) and `end_idx` indexing their flattened steps. The indices
/// must be strictly increasing, inside the list, end with the last step and
/// include every payload's last step (a segment never spans two payloads);
/// otherwise the whole batch is refused with errc::malformed_input (e.g.
/// DI-engine's un-offset indices of two or more collectors). A payload that
/// does not decode or check out is dropped with its segments, the others
/// are kept. Lag = learner_version - max(payload version, 0) per step,
/// recorded in `lags`; segments beyond max_lag are dropped and counted.
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
dingengine_flags(const std::vector<step_record>& steps,
                 const std::vector<std::int64_t>& end_idx);

/// Appends one collector's context to a learner's, as the context exchanger
/// merges deltas: payloads concatenated, end indices offset by the steps
/// merged before (`offset` false: DI-engine's merge, indices unchanged).
void merge_context(std::vector<dice::payload>& trajectories,
                   std::vector<std::int64_t>& end_idx,
                   const std::vector<dice::payload>& more,
                   const std::vector<std::int64_t>& more_end_idx,
                   bool offset = true);

} // namespace ppo

namespace ppo::detail {

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

} // namespace ppo::detail

// More specialized than Boost's std::vector save/load, so they replace them
// for these two element types (found through the version argument's
// namespace).
namespace boost::serialization {

/// Steps: count, then one block of bytes.
template <class Archive>
void save(Archive& ar, const std::vector<ppo::step_record>& xs,
          const unsigned int) {
  ppo::detail::save_records(ar, xs);
}

/// Steps: read in bounded chunks.
template <class Archive>
void load(Archive& ar, std::vector<ppo::step_record>& xs, const unsigned int) {
  ppo::detail::load_records(ar, xs);
}

/// Episodes: count, then one block of bytes.
template <class Archive>
void save(Archive& ar, const std::vector<ppo::episode_record>& xs,
          const unsigned int) {
  ppo::detail::save_records(ar, xs);
}

/// Episodes: read in bounded chunks.
template <class Archive>
void load(Archive& ar, std::vector<ppo::episode_record>& xs,
          const unsigned int) {
  ppo::detail::load_records(ar, xs);
}

} // namespace boost::serialization

// Records are values: no tracking, no class information.
BOOST_CLASS_IMPLEMENTATION(ppo::step_record,
                           boost::serialization::object_serializable)
BOOST_CLASS_TRACKING(ppo::step_record, boost::serialization::track_never)
BOOST_CLASS_IMPLEMENTATION(ppo::episode_record,
                           boost::serialization::object_serializable)
BOOST_CLASS_TRACKING(ppo::episode_record, boost::serialization::track_never)
