#pragma once

// The environment interface, with gymnasium's conventions: reset(seed) starts
// an episode, step(action) returns a reward and the terminated / truncated
// flags. Observations go into buffers the caller owns (flat_size() floats of
// the observation space), so a batch of environments steps without
// allocating and a collector can wrap the batch's buffer as a tensor.

#include "dice/env/space.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dice {

/// One environment's action: an index for a Discrete space, `size` floats
/// for a Box (a view into the caller's buffer, valid during the call).
struct action_view {
  /// Discrete: the chosen value in [0, n).
  std::int64_t index = 0;
  /// Box: the action's values (flat_size() of the action space), else null.
  const float* values = nullptr;
  /// Box: the number of values, else 0.
  std::size_t size = 0;
};

/// What one step returns besides the observation (gymnasium's step tuple).
struct step_result {
  /// The reward for the step.
  float reward = 0;
  /// The episode reached a terminal state (the MDP's end: no bootstrapping).
  bool terminated = false;
  /// The episode was cut short (a time limit, or the env's own reason).
  bool truncated = false;
};

/// One finished episode, as vector_env reports it (gymnasium's
/// RecordEpisodeStatistics: info["episode"]).
struct episode_stats {
  /// Index of the environment in its vector_env.
  std::size_t env = 0;
  /// Sum of the episode's rewards.
  double ret = 0;
  /// Steps in the episode.
  std::int64_t length = 0;
  /// True if the episode terminated; false if it was truncated.
  bool terminated = false;
  /// True if it ended because the env failed (a bad action or an exception);
  /// such an episode is also reported truncated.
  bool failed = false;
};

/// An environment; users subclass it. Not thread-safe: one caller at a time.
class env {
 public:
  /// Virtual: environments are owned through `std::unique_ptr<env>`.
  virtual ~env();

  /// A short name for messages, e.g. "CartPole-v1".
  virtual std::string name() const = 0;

  /// The space of one observation; must not change over the env's life.
  virtual space observation_space() const = 0;

  /// The space of one action; must not change over the env's life.
  virtual space action_space() const = 0;

  /// Starts an episode and writes its first observation to `obs`. With a
  /// seed the env reseeds its generator (gymnasium's reset(seed=...));
  /// without one it goes on with its generator.
  virtual void reset(std::optional<std::uint64_t> seed, float* obs) = 0;

  /// Applies `a` and writes the next observation to `obs`. May throw; a
  /// vector_env turns that into an error value.
  virtual step_result step(const action_view& a, float* obs) = 0;

  /// The episode length at which a vector_env truncates (gymnasium's
  /// TimeLimit wrapper); 0 for none.
  virtual std::int64_t max_episode_steps() const {
    return 0;
  }
};

} // namespace dice
