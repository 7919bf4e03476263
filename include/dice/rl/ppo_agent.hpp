#pragma once

// PPO as middleware: a collector that steps a vector_env with the behaviour
// policy and sends segments, a trainer that cuts the merged segments,
// updates the actor-critic and writes metrics and checkpoints, and use_ppo,
// which composes a whole node of a PPO run for its role in one call.
//
// A user program with its own environment (Discrete or Box actions):
//
//   struct config : dice::rl::ppo_run_config {
//     config() {
//       make_env = [](std::size_t) { return std::make_unique<my_env>(); };
//       title = "PPO my-env";
//     }
//   };
//   int main(int argc, char** argv) {
//     return dice::run<config>(argc, argv,
//       [](dice::node_setup& n, const config& cfg) {
//         dice::rl::use_ppo(n, cfg);
//       });
//   }
//
// The network's observation and action spaces come from the env the
// factory makes. Model versions: a model the learner sent after its
// iteration k has seen k + 1 updates (acting_version); lag is the learner's
// version minus the version that acted.

#include "dice/env/vector_env.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/rl/actor_critic.hpp"
#include "dice/rl/evaluator.hpp"
#include "dice/rl/outputs.hpp"
#include "dice/rl/ppo.hpp"
#include "dice/rl/run_config.hpp"
#include "dice/runtime/run.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dice::rl {

/// The version of the model a node acts with: learner updates its weights
/// have seen (the exchanger's model id + 1; 0 for the initial weights).
std::int64_t acting_version(const context& ctx) noexcept;

/// Writes `net`'s state_dict to `path` as a checkpoint PyTorch's
/// `torch.load` reads (a dict of tensors), through a temporary file and a
/// rename.
caf::error save_checkpoint(actor_critic& net, const std::string& path);

/// Loads a checkpoint save_checkpoint wrote into `net` (names, shapes and
/// dtypes are checked before anything is written); errc::invalid_config
/// names the file.
caf::error load_checkpoint(actor_critic& net, const std::string& path);

// -- collector ----------------------------------------------------------------

/// How a PPO collector steps its environments.
struct ppo_collector_options {
  /// Environments stepped as one batch (N).
  std::int64_t envs = 8;
  /// Steps of every environment per iteration (T): one segment per env.
  std::int64_t steps = 16;
  /// Seeds the environments (reset once with it) and the action sampling.
  std::uint64_t seed = 0;
  /// What the vector_env does when an env fails.
  vector_env_options env;
  /// Seconds between the collector's metrics lines.
  double metrics_every = 1.0;
};

/// What a collector did so far (for tests and reports).
struct ppo_collector_stats {
  /// Env steps taken.
  std::int64_t env_steps = 0;
  /// Episodes finished.
  std::int64_t episodes = 0;
  /// Iterations that sent segments.
  std::int64_t iterations = 0;
  /// Env failures (bad actions, throwing envs) the vector_env reported.
  std::int64_t env_errors = 0;
  /// Returns of the episodes finished so far, in order.
  std::vector<double> returns;
};

/// The collector middleware (DI-engine's StepCollector for on-policy data):
/// every iteration steps N envs T times with one batched act() per step of
/// `net` (the behaviour policy; Box actions are clipped to the bounds only
/// on the copy the env gets), and puts into the context one payload of the
/// T x N steps (env by env, stamped with acting_version), the end index of
/// every env's segment (T-1, 2T-1, ...), the finished episodes, and adds
/// the env steps and episodes to env_step / env_episode. `make_env` builds
/// env i of the collector. Writes a metrics line ("collector") at most
/// every metrics_every seconds when `out` is set; `stats` (optional) is
/// updated every iteration. A vector_env that cannot be made or stops
/// fails the node with the error.
middleware ppo_collector(actor_critic net, vector_env::factory make_env,
                         ppo_collector_options opts,
                         std::shared_ptr<run_outputs> out = nullptr,
                         std::shared_ptr<ppo_collector_stats> stats = nullptr);

// -- trainer ------------------------------------------------------------------

/// How a PPO trainer trains, reports and stops.
struct ppo_trainer_options {
  /// The algorithm (max_lag included).
  ppo_options ppo;
  /// Seeds minibatch shuffling.
  std::uint64_t seed = 0;
  /// Stop the cluster after this many env steps (0: no limit).
  std::int64_t max_env_steps = 0;
  /// Stop the cluster after this many seconds (0: no limit).
  double max_seconds = 0;
  /// Seconds between latest.pt checkpoints (<= 0: only at stop).
  double checkpoint_every = 10;
  /// Seconds between metrics lines and progress line updates.
  double report_every = 1.0;
  /// Load OUT/latest.pt (if present) before training (--resume).
  bool resume = false;
};

/// What a trainer did so far (for tests and reports).
struct ppo_trainer_stats {
  /// Updates (model versions trained).
  std::int64_t updates = 0;
  /// The last update's statistics.
  update_stats last;
  /// Lag of every sample received.
  lag_summary lags;
  /// Received, dropped and refused data.
  intake_counters intake;
  /// Gradient steps.
  std::int64_t grad_steps = 0;
  /// Training episodes received (from the collectors' ctx.episodes).
  std::int64_t episodes = 0;
  /// Mean return of the last (up to 100) training episodes (NaN: none).
  double train_return_mean = 0;
};

/// The trainer middleware (DI-engine's OnPolicyLearner): every iteration
/// cuts the merged ctx.trajectories / trajectory_end_idx into segments,
/// drops those older than max_lag, computes GAE or V-trace targets and
/// runs the PPO epochs on `net` (ctx.train_iter counts updates; lag is
/// measured against ctx.total_step, the learner's model version). Reads
/// ctx.episodes for the training return. Writes "learner" metrics lines and
/// the progress line to `out`, OUT/latest.pt and latest.json every
/// checkpoint_every seconds and at stop, adds its lag histogram and intake
/// counters to the summary, and finishes the run at max_env_steps /
/// max_seconds. `stats` (optional) is updated every iteration.
middleware ppo_trainer(actor_critic net, ppo_trainer_options opts,
                       std::shared_ptr<run_outputs> out,
                       std::shared_ptr<ppo_trainer_stats> stats = nullptr);

// -- one call per node
// ---------------------------------------------------------

/// Everything use_ppo needs besides the node and the env.
struct ppo_agent_options {
  /// The algorithm.
  ppo_options ppo;
  /// The network (hidden widths, Gaussian log std).
  actor_critic_options net;
  /// Collector settings (seed: the run's seed; each collector mixes in its
  /// node id).
  ppo_collector_options collect;
  /// Trainer settings (ppo is taken from `ppo` above).
  ppo_trainer_options train;
  /// Evaluator settings.
  eval_options eval;
  /// Outputs of the run (folder, title, stop value, ...).
  outputs_options outputs;
  /// How collectors get models.
  model_exchange_options models;
  /// Seeds the initial weights (the same on every node).
  std::uint64_t seed = 0;
  /// LibTorch intra-op threads of the process.
  std::int64_t threads = 1;
  /// The learner records what it applied here (--dice.record; empty: no).
  std::string record;
  /// The record's bound in bytes (0: none).
  std::uint64_t record_max_bytes = 0;
};

/// The settings of `cfg` (seed, limits, outputs, evaluation, collectors'
/// envs and steps, model exchange, network size) with the PPO options
/// `ppo` and a run titled `title`; errc::invalid_config names a bad option.
caf::expected<ppo_agent_options> ppo_agent_options_of(const run_config& cfg,
                                                      const ppo_cli& ppo,
                                                      std::string title);

/// Composes node `n` of a PPO run for its role: the exchangers
/// (use_exchangers), then a learner's ppo_trainer (plus the evaluator when
/// the cluster has no evaluator node), an evaluator's evaluator (greedy
/// actor_critic::mode, best.pt, stop at the stop value with a trained
/// model), or a collector's ppo_collector; every node's outputs come from
/// run_outputs::of. Every node builds the same initial weights from
/// `opts.seed`; the spaces come from make_env(0). With --resume, or when
/// the node was started again, every node starts from OUT/latest.pt. Throws
/// std::runtime_error for unusable spaces or outputs (dice::run reports it
/// as the node's build error). A learner group (--learners > 1) is refused.
void use_ppo(node_setup& n, const ppo_agent_options& opts,
             const vector_env::factory& make_env);

/// use_ppo with the options of `cfg` and `ppo` (ppo_agent_options_of);
/// throws std::runtime_error for a bad option.
void use_ppo(node_setup& n, const run_config& cfg, const ppo_cli& ppo,
             const vector_env::factory& make_env, const std::string& title);

/// --eval-only: loads the checkpoint `cfg.eval_only` into a network of
/// `cfg`'s size and `ppo`'s log std, plays cfg.eval_episodes greedy
/// episodes from cfg.seed and prints their returns and mean. Returns the
/// exit code (0, or 1 naming the error); std::nullopt when cfg.eval_only
/// is empty, so a config's run_instead can return it directly.
std::optional<int> ppo_eval_only(const run_config& cfg, const ppo_cli& ppo,
                                 const vector_env::factory& make_env);

/// The options of a PPO program: the common RL options, PPO's (ppo_cli),
/// the environment and the run's title. The program sets `make_env` and
/// `title` in its constructor and may change any default (see the top of
/// this header).
class ppo_run_config : public run_config {
 public:
  /// Registers PPO's options.
  ppo_run_config();

  /// PPO's hyper-parameters.
  ppo_cli ppo;
  /// Makes environment i of a collector's batch or of an evaluation.
  vector_env::factory make_env;
  /// Title of the plot, the progress line and the summary.
  std::string title = "PPO";

  /// Checks the options (exit code 2 naming the bad one), sets LibTorch's
  /// threads and, with --eval-only, plays greedy episodes with that
  /// checkpoint (ppo_eval_only); nullopt: run the nodes.
  std::optional<int> run_instead(caf::actor_system& sys) const override;
};

/// use_ppo with the options, environment and title of `cfg`; throws
/// std::runtime_error for a bad option.
void use_ppo(node_setup& n, const ppo_run_config& cfg);

} // namespace dice::rl
