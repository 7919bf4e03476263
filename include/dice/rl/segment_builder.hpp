#pragma once

// A PPO collector's bookkeeping without the env and the network: fed one
// vector step of N envs at a time as raw arrays (what a dice::vector_env
// step and an actor_critic::act give), it emits one iteration's payloads:
// the T x N steps laid out env by env with end indices T-1, 2T-1, ...,
// NT-1, and the episodes that finished. Episodes continue across
// iterations (their returns and lengths are kept per env). Torch-free.
//
// Usage (Discrete actions, N envs, T steps per iteration):
//   auto b = segment_builder::make(n, *step_layout::of(obs_space, act_space));
//   for (int t = 0; t < T; ++t) {
//     // obs: the observations acted on; act(): actions, logp, value
//     envs.step(actions);
//     b->add({obs, actions, nullptr, logp, value, envs.rewards(),
//             envs.final_obs(), envs.terminated(), envs.truncated()});
//   }
//   auto out = b->finish(node_id, model_version);

#include "dice/messages/payload.hpp"
#include "dice/rl/segments.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dice::rl {

/// One vector step of N envs as raw arrays (not owned; read by add()).
struct step_arrays {
  /// The observations the actions were taken in [N * obs_dim].
  const float* obs = nullptr;
  /// Discrete: the action indices [N]; null for Box.
  const std::int64_t* discrete_actions = nullptr;
  /// Box: the actions as sampled, before clipping [N * act_dim]; null for
  /// Discrete.
  const float* box_actions = nullptr;
  /// log pi(a|x) of the behaviour policy [N].
  const float* logp = nullptr;
  /// V(obs) of the behaviour policy [N]; null: no values sent.
  const float* value = nullptr;
  /// Rewards of the step [N].
  const float* reward = nullptr;
  /// Observations after the step, before any auto-reset [N * obs_dim]
  /// (a vector_env's final_obs()).
  const float* next_obs = nullptr;
  /// 1: the env's episode terminated [N].
  const std::uint8_t* terminated = nullptr;
  /// 1: the env's episode was truncated [N].
  const std::uint8_t* truncated = nullptr;
};

/// What one collector iteration produced.
struct collected_segments {
  /// One payload of the iteration's steps, env by env (empty without
  /// steps), stamped with origin and model version.
  std::vector<dice::payload> trajectories;
  /// One payload of episode_record (empty when none finished).
  std::vector<dice::payload> episodes;
  /// Index of each env's last step: T-1, 2T-1, ..., NT-1.
  std::vector<std::int64_t> trajectory_end_idx;
  /// Env steps taken (T x N).
  std::int64_t env_steps = 0;
  /// Returns of the episodes that finished, in the order they finished
  /// (step by step, env by env within a step).
  std::vector<double> finished_returns;
};

/// Collects the steps of N envs into one payload per iteration.
class segment_builder {
 public:
  /// A builder for `envs` envs (>= 1) with a usable `layout`, or
  /// errc::invalid_config.
  static caf::expected<segment_builder> make(std::size_t envs,
                                             const step_layout& layout);

  /// Appends one step of every env; a missing array (null where the layout
  /// needs one) gives errc::invalid_config and appends nothing.
  caf::error add(const step_arrays& s);

  /// Steps per env added since the last finish().
  std::int64_t steps() const noexcept {
    return steps_;
  }

  /// Number of envs.
  std::size_t envs() const noexcept {
    return envs_;
  }

  /// The layout of every step.
  const step_layout& layout() const noexcept {
    return layout_;
  }

  /// The iteration's payloads stamped with `origin` and `version` (the
  /// model version that acted); starts the next iteration.
  collected_segments finish(std::uint32_t origin, std::int64_t version);

 private:
  segment_builder(std::size_t envs, const step_layout& layout);

  std::size_t envs_;
  step_layout layout_;
  std::int64_t steps_ = 0;
  // This iteration's steps in the order they came (time-major); finish()
  // lays them out env by env.
  step_columns rows_;
  std::vector<episode_record> episodes_;
  std::vector<double> returns_;
  std::vector<std::int64_t> lengths_;
};

} // namespace dice::rl
