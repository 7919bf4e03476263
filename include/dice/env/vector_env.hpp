#pragma once

// N environments stepped as one batch with gymnasium 1.x's vector-env
// semantics (SyncVectorEnv): contiguous buffers, auto-reset in either of
// gymnasium's two modes, the TimeLimit wrapper, episode statistics, and
// failing environments turned into error values.
//
// Usage:
//
//   auto envs = dice::vector_env::make(8, [](std::size_t) {
//     return std::make_unique<dice::envs::cartpole>();
//   });
//   if (!envs) return envs.error();
//   envs->reset(42);
//   std::vector<std::int64_t> actions(8, 1);
//   for (int t = 0; t < 100; ++t) {
//     if (auto err = envs->step(actions)) return err;
//     for (auto& ep : envs->episodes()) log(ep.env, ep.ret, ep.length);
//   }

#include "dice/core/errc.hpp"
#include "dice/env/env.hpp"
#include "dice/env/space.hpp"

#include "caf/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dice {

/// When a finished environment starts its next episode (gymnasium 1.x's
/// AutoresetMode).
enum class autoreset : std::uint8_t {
  /// Reset within the finishing step: obs() holds the new episode's first
  /// observation, final_obs() the finished episode's last (info["final_obs"]).
  same_step,
  /// The finishing step returns the terminal observation; the next step()
  /// resets that env instead of stepping it (gymnasium 1.x's default,
  /// EnvPool's).
  next_step,
};

/// What a vector_env does when one of its envs fails.
enum class env_error_policy : std::uint8_t {
  /// End that env's episode (truncated, failed), reset it and go on with the
  /// batch; step() succeeds and the error is counted.
  reset_env,
  /// Finish the batch, then return the error; the vector refuses to step
  /// until the next successful reset().
  stop,
};

/// How a vector_env behaves.
struct vector_env_options {
  /// Auto-reset mode.
  autoreset mode = autoreset::same_step;
  /// Reaction to a failing env.
  env_error_policy on_error = env_error_policy::reset_env;
};

/// SplitMix64's output function (Steele, Lea and Flood 2014).
std::uint64_t splitmix64(std::uint64_t x) noexcept;

/// The seed env `index` gets when its vector is reset with `seed`:
/// splitmix64(seed * 1000003 + index). Gymnasium seeds env i with seed + i;
/// mixing spreads neighbouring envs (and neighbouring run seeds) over the
/// whole 64-bit seed range, so no two generators start from related seeds,
/// and it reproduces the seeding of dice's earlier CartPole runs
/// (examples/dqn_cartpole's mix_seed).
std::uint64_t env_seed(std::uint64_t seed, std::size_t index) noexcept;

/// N environments with equal spaces, stepped together. Buffers are
/// row-major, one row per env, sized at construction: step() allocates
/// nothing unless an env fails. Move-only; not thread-safe.
class vector_env {
 public:
  /// Builds the env with index i (0 <= i < n).
  using factory = std::function<std::unique_ptr<env>(std::size_t index)>;

  /// Builds `n` envs with `make_env`. Fails (invalid_config) if n is 0, the
  /// factory returns null or throws, a space is malformed, or an env's
  /// observation or action space differs from env 0's. The vector must be
  /// reset() before its first step().
  static caf::expected<vector_env> make(std::size_t n, const factory& make_env,
                                        vector_env_options opts = {});

  /// Moves the envs and buffers.
  vector_env(vector_env&&) noexcept;

  /// Moves the envs and buffers.
  vector_env& operator=(vector_env&&) noexcept;

  /// Destroys the envs.
  ~vector_env();

  // -- properties -------------------------------------------------------------

  /// Number of envs.
  std::size_t size() const noexcept {
    return envs_.size();
  }

  /// The observation space of one env.
  const space& observation_space() const noexcept {
    return obs_space_;
  }

  /// The action space of one env.
  const space& action_space() const noexcept {
    return act_space_;
  }

  /// Floats per observation.
  std::size_t obs_dim() const noexcept {
    return obs_dim_;
  }

  /// Floats per Box action (1 for Discrete).
  std::size_t act_dim() const noexcept {
    return act_dim_;
  }

  /// The options given to make().
  const vector_env_options& options() const noexcept {
    return opts_;
  }

  /// Env `i` itself (tests, rendering); stepping it directly bypasses the
  /// vector's bookkeeping.
  env& at(std::size_t i) noexcept {
    return *envs_[i];
  }

  // -- stepping ---------------------------------------------------------------

  /// Resets every env and the statistics of the running episodes. With a
  /// seed env i is reset with env_seed(seed, i), without one each env goes on
  /// with its generator. An env that throws is retried once; if it throws
  /// again the error (env_failed) is returned and the vector stays stopped.
  caf::error reset(std::optional<std::uint64_t> seed = std::nullopt);

  /// Steps every env with actions[i] (n values) for a Discrete action space.
  /// Errors: invalid_action for a Box space; env_failed before reset() or
  /// after a stop; under env_error_policy::stop the first env failure.
  caf::error step(const std::int64_t* actions);

  /// Steps every env with actions[i * act_dim() .. ] (n * act_dim() values)
  /// for a Box action space. Errors as for the integer overload.
  caf::error step(const float* actions);

  /// step() with a size check (n values).
  caf::error step(const std::vector<std::int64_t>& actions);

  /// step() with a size check (n * act_dim() values).
  caf::error step(const std::vector<float>& actions);

  // -- results of the last reset() or step() ----------------------------------

  /// Observations [n * obs_dim]: what the policy acts on next.
  const std::vector<float>& obs() const noexcept {
    return obs_;
  }

  /// The observation each env's step produced, before any same-step reset
  /// [n * obs_dim]: the finished episode's last observation where an env
  /// finished (gymnasium's info["final_obs"]), equal to obs() elsewhere. An
  /// env that failed repeats the observation its action was chosen on.
  const std::vector<float>& final_obs() const noexcept {
    return final_obs_;
  }

  /// Rewards [n]; 0 for a failed env and for a next-step reset.
  const std::vector<float>& rewards() const noexcept {
    return rewards_;
  }

  /// Terminated flags [n], 0 or 1.
  const std::vector<std::uint8_t>& terminated() const noexcept {
    return terminated_;
  }

  /// Truncated flags [n], 0 or 1; both flags may be set when the last step
  /// before the time limit also terminates (gymnasium's TimeLimit).
  const std::vector<std::uint8_t>& truncated() const noexcept {
    return truncated_;
  }

  /// 1 for envs that failed in the last step or reset: a bad action or a
  /// throwing step (the episode was ended), or a reset that threw (retried).
  const std::vector<std::uint8_t>& failed() const noexcept {
    return failed_;
  }

  /// The episodes that ended in the last step, in env order.
  const std::vector<episode_stats>& episodes() const noexcept {
    return episodes_;
  }

  // -- running episodes and totals --------------------------------------------

  /// Return of each env's running episode so far [n].
  const std::vector<double>& episode_returns() const noexcept {
    return returns_;
  }

  /// Steps of each env's running episode so far [n].
  const std::vector<std::int64_t>& episode_lengths() const noexcept {
    return lengths_;
  }

  /// step() calls accepted since construction.
  std::uint64_t step_count() const noexcept {
    return step_count_;
  }

  /// Env steps completed since construction (failed and reset steps do not
  /// count).
  std::uint64_t total_steps() const noexcept {
    return total_steps_;
  }

  /// Episodes ended since construction, failed ones included.
  std::uint64_t total_episodes() const noexcept {
    return total_episodes_;
  }

  /// Env failures since construction (bad actions and exceptions).
  std::uint64_t errors() const noexcept {
    return errors_;
  }

  /// The latest env failure; none if there was none.
  const caf::error& last_error() const noexcept {
    return last_error_;
  }

  /// True if the vector refuses to step until the next successful reset().
  bool stopped() const noexcept {
    return stopped_;
  }

 private:
  vector_env(std::vector<std::unique_ptr<env>> envs,
             std::vector<std::string> names,
             std::vector<std::int64_t> time_limits, space obs_space,
             space act_space, vector_env_options opts);

  caf::error step_impl(const std::int64_t* discrete, const float* box);

  // Steps (or, in next_step mode, resets) env i; `fatal` receives the first
  // error that stops the vector.
  void step_one(std::size_t i, const std::int64_t* discrete, const float* box,
                caf::error& fatal);

  bool action_ok(const action_view& a) const noexcept;

  std::string describe_bad_action(std::size_t i, const action_view& a) const;

  // Resets env i into its obs() row; false (and stopped) if it threw, after
  // one retry under reset_env.
  bool reset_one(std::size_t i, std::optional<std::uint64_t> seed,
                 caf::error& fatal);

  // Ends env i's episode as failed and applies the error policy.
  void fail(std::size_t i, caf::error err, caf::error& fatal);

  void finish_episode(std::size_t i, bool terminated, bool failed);

  // "env 3 (CartPole-v1)".
  std::string where(std::size_t i) const;

  // " at step 12 of its episode (vector step 4711)".
  std::string at_step(std::size_t i) const;

  float* obs_row(std::size_t i) noexcept {
    return obs_.data() + i * obs_dim_;
  }

  float* final_row(std::size_t i) noexcept {
    return final_obs_.data() + i * obs_dim_;
  }

  std::vector<std::unique_ptr<env>> envs_;
  std::vector<std::string> names_;
  std::vector<std::int64_t> time_limits_;
  space obs_space_;
  space act_space_;
  vector_env_options opts_;
  std::size_t obs_dim_ = 0;
  std::size_t act_dim_ = 0;
  std::vector<float> obs_;
  std::vector<float> final_obs_;
  std::vector<float> rewards_;
  std::vector<std::uint8_t> terminated_;
  std::vector<std::uint8_t> truncated_;
  std::vector<std::uint8_t> failed_;
  std::vector<std::uint8_t> pending_reset_;
  std::vector<episode_stats> episodes_;
  std::vector<double> returns_;
  std::vector<std::int64_t> lengths_;
  std::uint64_t step_count_ = 0;
  std::uint64_t total_steps_ = 0;
  std::uint64_t total_episodes_ = 0;
  std::uint64_t errors_ = 0;
  caf::error last_error_;
  bool was_reset_ = false;
  bool stopped_ = false;
};

} // namespace dice
