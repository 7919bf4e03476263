#pragma once

// One-step or n-step transitions of discrete-action environments with any
// observation size, column-wise, as they travel from collectors to a
// learner inside a dice::payload, and the accumulator that makes them.

#include "caf/error.hpp"

#include <boost/serialization/split_member.hpp>
#include <boost/serialization/tracking.hpp>
#include <boost/serialization/vector.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dice::rl {

/// Transitions column-wise (what travels in one payload item). `reward` is
/// the n-step discounted return and `discount` gamma^k for the bootstrap,
/// 0 after a termination. Actions are int64: the dtype of torch's gather
/// index and of vector_env's discrete actions, and no limit on Discrete(n).
struct transition_batch {
  /// Floats per observation.
  std::int64_t obs_dim = 0;
  /// Observations [n * obs_dim].
  std::vector<float> obs;
  /// Actions [n].
  std::vector<std::int64_t> action;
  /// n-step discounted rewards [n].
  std::vector<float> reward;
  /// Observations to bootstrap from [n * obs_dim].
  std::vector<float> next_obs;
  /// Bootstrap factors [n], in [0, 1].
  std::vector<float> discount;

  /// Number of transitions.
  std::size_t size() const noexcept {
    return action.size();
  }

  /// True when the batch holds no transition.
  bool empty() const noexcept {
    return action.empty();
  }

  /// Reserves room for `n` more transitions.
  void reserve(std::size_t n);

  /// Drops every transition (obs_dim stays).
  void clear() noexcept;

  /// Writes obs_dim and the columns (vectors of arithmetic types go as one
  /// block of bytes each).
  template <class Archive>
  void save(Archive& ar, unsigned) const {
    ar << obs_dim << obs << action << reward << next_obs << discount;
  }

  /// Reads what `save` wrote and checks it (the bytes come from the
  /// network): a batch `validate` refuses throws, which dice::unpack turns
  /// into errc::malformed_input.
  template <class Archive>
  void load(Archive& ar, unsigned) {
    transition_batch tmp;
    ar >> tmp.obs_dim >> tmp.obs >> tmp.action >> tmp.reward >> tmp.next_obs
      >> tmp.discount;
    throw_if_invalid(tmp);
    *this = std::move(tmp);
  }

  BOOST_SERIALIZATION_SPLIT_MEMBER()

 private:
  static void throw_if_invalid(const transition_batch& x);
};

/// Checks that the columns agree (obs and next_obs hold size() * obs_dim
/// floats, obs_dim >= 1 unless empty), every number is finite, actions are
/// not negative and discounts lie in [0, 1]; errc::malformed_input says what
/// is wrong.
caf::error validate(const transition_batch& x);

/// Turns per-step experience of N environments into n-step transitions.
/// Steps that are not yet n steps old stay pending until later calls.
class nstep_accumulator {
 public:
  /// Tracks `envs` environments with `obs_dim` floats per observation;
  /// `nstep` below 1 counts as 1.
  nstep_accumulator(std::size_t envs, std::int64_t obs_dim, int nstep,
                    float gamma);

  /// Records one step of every environment: `obs` [envs * obs_dim] before
  /// the step, `next_obs` after it (before any auto-reset: the final
  /// observation of an episode). Finished transitions are appended to
  /// `out`, which must be empty or hold transitions of this obs_dim
  /// (errc::invalid_config otherwise, nothing recorded).
  caf::error add(const float* obs, const std::int64_t* actions,
                 const float* rewards, const float* next_obs,
                 const std::uint8_t* terminated, const std::uint8_t* truncated,
                 transition_batch& out);

  /// Steps recorded but not yet emitted, over all environments.
  std::size_t pending() const noexcept;

  /// Forgets every pending step (e.g. after resetting the environments).
  void clear() noexcept;

  /// Floats per observation.
  std::int64_t obs_dim() const noexcept {
    return obs_dim_;
  }

 private:
  // The last `nstep_` steps of one environment, oldest first, in a ring of
  // nstep_ slots (no allocation per step).
  struct window {
    std::vector<float> obs;
    std::vector<std::int64_t> action;
    std::vector<float> reward;
    std::size_t head = 0;
    std::size_t count = 0;
  };
  void emit(window& w, const float* next_obs, bool terminal,
            transition_batch& out);
  std::int64_t obs_dim_;
  int nstep_;
  float gamma_;
  std::vector<window> windows_;
};

} // namespace dice::rl

// Batches are values; tracking them would only cost time.
BOOST_CLASS_TRACKING(dice::rl::transition_batch,
                     boost::serialization::track_never)
