// One node of a multi-process DQN cluster (dice-launch or SLURM): the role
// this process runs, its pipeline (demo::use_role, shared with
// ppo_cartpole), a learner restarted by dice-launch, and its summary.

#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/learner_hello.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/node.hpp"
#include "dice/torch/model.hpp"

#include "caf/actor_system.hpp"

#include "role_pipeline.hpp"
#include "shared_run.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

namespace dqn {

using demo::clock_type;

namespace {

/// The address a group's learner binds Gloo to and publishes as rank 0:
/// the node's listen address, else its entry in dice.nodes, else loopback.
std::string group_address(const dice::node_config& cfg) {
  if (!cfg.host.empty() && cfg.host != "0.0.0.0" && cfg.host != "::")
    return cfg.host;
  if (cfg.index < cfg.nodes.size() && !cfg.nodes[cfg.index].host.empty())
    return cfg.nodes[cfg.index].host;
  return "127.0.0.1";
}

} // namespace

std::uint32_t default_collectors(std::uint32_t workers,
                                 std::uint32_t learners) {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < workers; ++i)
    if (dice::default_roles(i, workers, learners).has(dice::role::collector))
      ++n;
  return n;
}

caf::expected<run_summary> run_node(caf::actor_system& sys,
                                    const run_options& opts,
                                    const dice::node_config& cfg) {
  auto run = std::make_shared<shared_run>();
  run->opts = opts;
  run->distributed = true;
  auto roles = cfg.roles.empty()
    ? dice::default_roles(cfg.index, cfg.workers, cfg.learners)
    : cfg.roles;
  auto id = cfg.id;
  // One pipeline per process (demo::main_role).
  auto role = demo::main_role(roles);
  // Without an evaluator node (a 2-node cluster) the learner evaluates, so
  // the stop value still ends the run.
  // A group's learners are nodes 0..L-1 (their rank is the index), rank 0
  // evaluates when no node is left for an evaluator.
  bool grouped = role == dice::role::learner && cfg.learners > 1;
  int rank = grouped ? static_cast<int>(cfg.index) : 0;
  bool evaluates = role == dice::role::evaluator
    || (role == dice::role::learner && rank == 0
        && cfg.workers <= cfg.learners + 1);
  // A learner that dice-launch started again resumes from its last
  // checkpoint (no --resume needed); other nodes get its model anyway.
  if (cfg.restart_count > 0 && role == dice::role::learner && !opts.resume) {
    if (std::filesystem::exists(path_in(opts, "latest.pt"))) {
      run->opts.resume = true;
      dice::log::info(id,
                      "restart " + std::to_string(cfg.restart_count)
                        + ": resuming from the last checkpoint");
    } else {
      dice::log::warning(id,
                         "restart " + std::to_string(cfg.restart_count)
                           + ": no checkpoint in " + opts.out
                           + ", so this learner starts without one: "
                             "fresh weights, train_iter 0, env_step 0, "
                             "env_episode 0, empty replay buffer");
    }
  }
  auto resume = open_outputs(*run, "metrics-" + std::to_string(id) + ".jsonl",
                             role == dice::role::learner, id,
                             cfg.restart_count > 0);
  if (!resume)
    return resume.error();
  auto node = dice::node::start(sys, cfg);
  if (!node)
    return node.error();
  dice::pipeline pipe;
  std::shared_ptr<group_trainer> trainer;
  try {
    // Same seed, same construction: every process starts from the same
    // weights as the learner (the in-process run copies them instead).
    torch::manual_seed(opts.seed);
    auto net = make_net(opts, *resume);
    // A restarted learner greets collectors that wait for its model (they
    // would otherwise wait for data while it waits for theirs).
    dice::context_exchanger_options co;
    if (grouped) {
      if (cfg.index >= cfg.learners)
        throw std::runtime_error(
          "a learner of a group of " + std::to_string(cfg.learners)
          + " must be one of nodes 0.." + std::to_string(cfg.learners - 1));
      dice::learner_group_member_options mo;
      mo.rank = rank;
      mo.size = static_cast<int>(cfg.learners);
      // Restarted by dice-launch: the group runs on without this learner,
      // which asks to be admitted again.
      mo.rejoin = cfg.restart_count > 0;
      mo.max_nodes = std::max<std::uint32_t>(cfg.workers, cfg.id + 1);
      mo.address = group_address(cfg);
      mo.mode = opts.reduce == "flat" ? dice::reduce_mode::flat
                                      : dice::reduce_mode::bucketed;
      trainer = std::make_shared<group_trainer>();
      trainer->member = std::make_shared<dice::learner_group_member>(mo);
      co.partition = trainer->member->partition();
      pipe.use(trainer->member->make_middleware());
    }
    // Rank 0 alone greets the collectors and publishes models.
    if (role == dice::role::learner && rank == 0)
      pipe.use(dice::learner_hello(dice::model_port_of(net.ptr())));
    pipe.use(dice::context_exchanger(co));
    demo::use_role(pipe, {role, rank == 0, evaluates}, run, net, id, trainer);
  } catch (const std::exception& e) {
    node->stop();
    return dice::make_error(dice::errc::invalid_config,
                            std::string{"cannot build the node: "} + e.what());
  }
  dice::log::info(id,
                  std::string{"DQN on CartPole-v1: node "} + std::to_string(id)
                    + " of " + std::to_string(cfg.workers) + ", "
                    + dice::to_string(dice::role_set{role})
                    + (role == dice::role::collector ? " with "
                           + std::to_string(opts.envs_per_collector) + " envs"
                                                     : std::string{})
                    + ", seed " + std::to_string(opts.seed) + ", out "
                    + opts.out);
  dice::node_run_options nro;
  // The learner's state lives in its middleware: a fresh role actor would
  // start it over. Its process is what dice-launch --max-restarts restarts.
  nro.max_restarts = 0;
  if (cfg.max_restarts > 0)
    dice::log::warning(id,
                       "dqn_cartpole ignores --dice.max-restarts; use "
                       "dice-launch --max-restarts to restart its nodes");
  if (opts.max_seconds > 0)
    nro.deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.max_seconds + 120));
  std::optional<demo::progress_line> progress;
  progress.emplace(opts.progress);
  run->progress = opts.progress ? &*progress : nullptr;
  run->start = clock_type::now();
  auto rep = node->run(std::move(pipe), nro);
  run->progress = nullptr;
  progress.reset();
  node->stop();
  if (!rep)
    return rep.error();
  if (trainer && trainer->member->rank_zero_lost()
      && trainer->member->writes_last_checkpoint())
    dice::log::error(
      id,
      "the learner group lost rank 0, so the run stopped; this learner "
      "wrote the group's state to "
        + path_in(opts, "latest.pt") + ", learner.pt and latest.json "
        + "(env_step " + std::to_string(rep->env_step) + ", train_iter "
        + std::to_string(rep->train_iter)
        + "). Resume: run the same command again with --resume, e.g. "
          "dice-launch --workers "
        + std::to_string(cfg.workers) + " --learners "
        + std::to_string(cfg.learners)
        + " -- dqn_cartpole <the same options> --resume --out=" + opts.out);
  run_summary sum;
  sum.node = id;
  sum.roles = dice::to_string(dice::role_set{role});
  sum.seconds = run->seconds();
  sum.resumed_env_steps = role == dice::role::collector ? 0
                                                        : run->resume_env_step;
  sum.resumed_train_iters = run->resume_train_iter;
  sum.env_steps = rep->env_step;
  sum.train_iters = rep->train_iter;
  sum.learner_iterations = role == dice::role::learner ? rep->iterations : 0;
  sum.stop_reason = rep->stop_reason;
  sum.failed = rep->failed;
  collect_results(*run, sum);
  if (evaluates)
    demo::write_eval_plot(opts.out, run->evals, "DQN CartPole-v1",
                          opts.stop_value, opts.plot, id);
  write_summary(opts, sum, "summary-" + std::to_string(id) + ".json");
  return sum;
}

} // namespace dqn
