#include "dice/rl/run_config.hpp"

#include "dice/core/errc.hpp"

#include "caf/actor_system_config.hpp"
#include "caf/config_option_adder.hpp"

namespace dice::rl {

run_config::run_config() {
  // An RL node keeps its core busy with envs or gradients, and a cluster
  // runs more nodes than cores: CAF's idle workers must not spin for work.
  // By default each polls 100 times, then 500 times 50 us apart, before it
  // waits on its condition variable (which a message still wakes): on 2
  // cores that cost 2 collector processes 28 % of their steps (18.0k
  // against 25.9k Hopper-v4 steps/s, mujoco_bench, docs/mujoco.md).
  // --work-stealing.* on the command line still sets them.
  set("work-stealing.aggressive-poll-attempts", 0);
  set("work-stealing.moderate-poll-attempts", 0);
  opt_group{custom_options_, "global"}
    .add(seed, "seed", "random seed")
    .add(out, "out", "output folder")
    .add(resume, "resume", "continue from OUT/latest.pt and OUT/latest.json")
    .add(max_env_steps, "max-env-steps",
         "stop after this many env steps (0: no limit)")
    .add(max_seconds, "max-seconds", "stop after this long (0: no limit)")
    .add(stop_value, "stop-value", "stop at this greedy eval mean")
    .add(eval_every, "eval-every", "learner iterations between evaluations")
    .add(eval_episodes, "eval-episodes", "greedy episodes per evaluation")
    .add(eval_only, "eval-only",
         "play greedy episodes with this checkpoint and exit")
    .add(quiet, "quiet", "no live progress line on stderr")
    .add(no_plot, "no-plot", "do not write OUT/eval_return.png")
    .add(threads, "threads", "LibTorch intra-op threads per process")
    .add(envs_per_collector, "envs-per-collector",
         "environments each collector steps as one batch")
    .add(steps_per_collect, "steps-per-collect",
         "steps of every environment per collector iteration")
    .add(hidden, "hidden", "width of the networks' hidden layers")
    .add(layers, "layers", "hidden layers of the networks")
    .add(checkpoint_every, "checkpoint-every",
         "seconds between the learner's checkpoints")
    .add(on_env_error, "on-env-error",
         "a failing env: reset it and go on, or stop the collector")
    .add(models.periodical, "periodical",
         "collectors take models through the periodical model exchanger")
    .add(models.period, "model-period",
         "learner iterations between models (periodical)")
    .add(models.stale_toleration, "stale-toleration",
         "collector iterations one model may serve (periodical)");
  opt_group{custom_options_, "dice"}
    .add(record, "record",
         "the learner records what it applied, in order, in DIR "
         "(docs/replay.md)")
    .add(record_max_bytes, "record-max-bytes",
         "the record ends here, marked as cut; the run goes on (0: no limit)")
    .add(replay, "replay",
         "run the learner alone from the record in DIR, checking its weights "
         "after every iteration, and exit");
}

std::vector<std::int64_t> run_config::hidden_sizes() const {
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), hidden);
}

outputs_options run_config::outputs(std::string title) const {
  outputs_options x;
  x.out = out;
  x.title = std::move(title);
  x.stop_value = stop_value;
  x.progress = !quiet;
  x.plot = !no_plot;
  x.resume = resume;
  return x;
}

vector_env_options run_config::env_options() const {
  vector_env_options x;
  x.on_error = on_env_error == "stop" ? env_error_policy::stop
                                      : env_error_policy::reset_env;
  return x;
}

eval_options run_config::eval() const {
  eval_options x;
  x.every = eval_every;
  x.episodes = static_cast<int>(eval_episodes);
  x.seed = static_cast<std::uint64_t>(seed);
  x.stop_value = stop_value;
  return x;
}

caf::error run_config::validate() const {
  auto bad = [](const std::string& what) {
    return make_error(errc::invalid_config, what);
  };
  if (envs_per_collector < 1 || envs_per_collector > 65536)
    return bad("--envs-per-collector must be 1..65536");
  if (steps_per_collect < 1)
    return bad("--steps-per-collect must be at least 1");
  if (hidden < 1 || layers < 1 || layers > 16)
    return bad("--hidden must be at least 1 and --layers 1..16");
  if (eval_episodes < 1 || eval_episodes > 100000)
    return bad("--eval-episodes must be 1..100000");
  if (eval_every < 1)
    return bad("--eval-every must be at least 1");
  if (on_env_error != "reset" && on_env_error != "stop")
    return bad("--on-env-error must be reset or stop");
  if (threads < 1)
    return bad("--threads must be at least 1");
  if (models.period < 1 || models.stale_toleration < 1)
    return bad("--model-period and --stale-toleration must be at least 1");
  if (record_max_bytes < 0)
    return bad("--dice.record-max-bytes must be 0 (no limit) or more");
  if (!record.empty() && !replay.empty())
    return bad("--dice.record and --dice.replay exclude each other");
  if (!record.empty() && resume)
    return bad("--dice.record records a learner from its initial weights, "
               "not a resumed one (--resume)");
  return caf::none;
}

void dqn_cli::add_to(caf::config_option_set& opts) {
  caf::config_option_adder{opts, "global"}
    .add(values.nstep, "nstep", "n-step TD targets")
    .add(values.lr, "lr", "Adam learning rate")
    .add(values.batch_size, "batch-size", "samples per gradient step")
    .add(values.replay.capacity, "buffer-size", "replay capacity")
    .add(values.learning_starts, "learning-starts",
         "transitions before training")
    .add(values.updates_per_step, "updates-per-step",
         "gradient steps per new transition")
    .add(values.target_update_every, "target-update-every",
         "hard target update period, 0: Polyak")
    .add(values.tau, "tau", "Polyak factor with --target-update-every=0")
    .add(no_double, "no-double-dqn", "plain (not double) DQN targets")
    .add(values.epsilon.decay_steps, "eps-decay-steps",
         "env steps of the epsilon decay")
    .add(values.epsilon.end, "eps-end", "final epsilon")
    .add(eps_decay, "eps-decay", "linear or exponential")
    .add(values.replay.prioritized, "prioritized", "prioritized replay")
    .add(values.replay.alpha, "per-alpha", "prioritized replay's alpha")
    .add(values.replay.beta, "per-beta", "prioritized replay's first beta");
}

caf::expected<dqn_options> dqn_cli::resolve(const run_config& cfg) const {
  auto x = values;
  x.hidden = cfg.hidden_sizes();
  x.double_dqn = !no_double;
  if (eps_decay == "exponential")
    x.epsilon.decay = decay_kind::exponential;
  else if (eps_decay == "linear")
    x.epsilon.decay = decay_kind::linear;
  else
    return make_error(errc::invalid_config,
                      "--eps-decay must be linear or exponential");
  if (auto err = validate(x))
    return err;
  return x;
}

void ppo_cli::add_to(caf::config_option_set& opts) {
  caf::config_option_adder{opts, "global"}
    .add(values.vtrace, "vtrace", "V-trace targets instead of GAE")
    .add(values.max_lag, "max-lag",
         "drop segments more than this many versions old (-1: keep)")
    .add(values.rho_bar, "rho-bar", "V-trace rho_bar")
    .add(values.c_bar, "c-bar", "V-trace c_bar")
    .add(values.gamma, "gamma", "discount")
    .add(values.lambda, "lambda", "GAE / trace lambda")
    .add(values.clip, "clip", "PPO clip range")
    .add(values.value_clip, "value-clip", "value clip range (0: off)")
    .add(values.lr, "lr", "Adam learning rate")
    .add(values.epochs, "epochs", "passes over each batch")
    .add(values.minibatch, "minibatch", "samples per gradient step")
    .add(values.vf_coef, "vf-coef", "value loss weight")
    .add(values.ent_coef, "ent-coef", "entropy bonus weight")
    .add(values.max_grad_norm, "max-grad-norm", "gradient clip")
    .add(log_std, "log-std", "initial log std of a Gaussian policy");
}

caf::expected<ppo_options> ppo_cli::resolve() const {
  auto bad = [](const std::string& what) {
    return make_error(errc::invalid_config, what);
  };
  auto& x = values;
  if (x.epochs < 1 || x.minibatch < 1)
    return bad("--epochs and --minibatch must be at least 1");
  if (!(x.lr > 0) || !(x.clip > 0) || x.value_clip < 0)
    return bad("--lr and --clip must be positive, --value-clip at least 0");
  if (!(x.gamma >= 0 && x.gamma <= 1) || !(x.lambda >= 0 && x.lambda <= 1))
    return bad("--gamma and --lambda must be in [0, 1]");
  return x;
}

} // namespace dice::rl
