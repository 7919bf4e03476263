// The one-process DQN run: learner (or a learner group), evaluator and
// collectors as role actors of one actor system (dice::run_local).

#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/learner_hello.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/torch/model.hpp"

#include "caf/actor_system.hpp"

#include "shared_run.hpp"

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

namespace dqn {

namespace {

constexpr std::uint32_t learner_node = 0;
constexpr std::uint32_t evaluator_node = 1;
constexpr std::uint32_t first_collector_node = 2;

using demo::clock_type;

} // namespace

caf::expected<run_summary> run_training(caf::actor_system& sys,
                                        const run_options& opts) {
  auto run = std::make_shared<shared_run>();
  run->opts = opts;
  auto resume = open_outputs(*run, "metrics.jsonl", true, learner_node);
  if (!resume)
    return resume.error();
  auto resume_from = *resume;
  std::optional<demo::progress_line> progress;
  progress.emplace(opts.progress);
  run->progress = opts.progress ? &*progress : nullptr;
  // Role actors run on their own threads (role_config::detached), so a
  // group's learners blocking in collectives hold no worker the others need.
  std::vector<dice::local_node> nodes;
  try {
    torch::manual_seed(opts.seed);
    // Every node holds its own copy of the network; the exchangers keep the
    // copies in step with the learner's.
    auto learner_net = make_net(opts, resume_from);
    auto eval_net = make_net(opts, resume_from);
    hard_update(*eval_net, *learner_net);
    auto add = [&](std::uint32_t id, dice::role r, dice::middleware models,
                   dice::middleware work) {
      dice::pipeline p;
      p.use(dice::context_exchanger())
        .use(std::move(models))
        .use(std::move(work));
      nodes.push_back(dice::local_node{id, {r}, std::move(p)});
    };
    if (opts.learners <= 1) {
      add(learner_node, dice::role::learner, learner_models(learner_net, opts),
          train_step(run, learner_net, learner_node));
    } else {
      // Rank 0 is node 0 (it alone publishes models); ranks 1.. follow the
      // collectors' ids. Each learner is its own node: the group forms
      // through the router and all-reduces over loopback.
      auto mode = opts.reduce == "flat" ? dice::reduce_mode::flat
                                        : dice::reduce_mode::bucketed;
      for (std::uint32_t r = 0; r < opts.learners; ++r) {
        auto id = r == 0 ? learner_node
                         : first_collector_node + opts.collectors + r - 1;
        auto net = learner_net;
        if (r > 0) {
          net = make_net(opts, resume_from);
          hard_update(*net, *learner_net);
        }
        dice::learner_group_member_options mo;
        mo.rank = static_cast<int>(r);
        mo.size = static_cast<int>(opts.learners);
        mo.max_nodes = first_collector_node + opts.collectors + opts.learners;
        mo.mode = mode;
        auto trainer = std::make_shared<group_trainer>();
        trainer->member = std::make_shared<dice::learner_group_member>(mo);
        dice::context_exchanger_options co;
        co.partition = trainer->member->partition();
        dice::pipeline p;
        p.use(trainer->member->make_middleware())
          .use(dice::context_exchanger(co));
        if (r == 0)
          p.use(learner_models(net, opts));
        p.use(train_step(run, net, id, trainer));
        nodes.push_back(
          dice::local_node{id, {dice::role::learner}, std::move(p)});
      }
    }
    add(evaluator_node, dice::role::evaluator,
        dice::model_exchanger(dice::model_port_of(eval_net.ptr())),
        eval_step(run, eval_net, evaluator_node));
    for (std::uint32_t i = 0; i < opts.collectors; ++i) {
      auto id = first_collector_node + i;
      auto net = make_net(opts, resume_from);
      hard_update(*net, *learner_net);
      add(id, dice::role::collector, collector_models(net, opts),
          collect_step(run, net, id));
    }
  } catch (const std::exception& e) {
    return dice::make_error(dice::errc::invalid_config,
                            std::string{"cannot build the nodes: "} + e.what());
  }
  dice::log::info(learner_node,
                  "DQN on CartPole-v1: " + std::to_string(opts.learners)
                    + (opts.learners > 1 ? " learners (one group)" : " learner")
                    + ", 1 evaluator, " + std::to_string(opts.collectors)
                    + " collectors x " + std::to_string(opts.envs_per_collector)
                    + " envs, "
                    + (opts.periodical ? "periodical" : "per-iteration")
                    + " model exchange, seed " + std::to_string(opts.seed)
                    + ", out " + opts.out);
  dice::local_run_options lro;
  lro.print_reports = false;
  if (opts.max_seconds > 0)
    lro.deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(opts.max_seconds + 120));
  run->start = clock_type::now();
  auto reports = dice::run_local(sys, std::move(nodes), lro);
  run->progress = nullptr;
  progress.reset();
  if (!reports)
    return reports.error();
  run_summary sum;
  sum.seconds = run->seconds();
  sum.resumed_env_steps = run->resume_env_step;
  sum.resumed_train_iters = run->resume_train_iter;
  for (auto& rep : *reports) {
    if (rep.node == learner_node) {
      sum.env_steps = rep.env_step;
      sum.train_iters = rep.train_iter;
      sum.learner_iterations = rep.iterations;
      sum.stop_reason = rep.stop_reason;
    }
    // One process, one run: it failed if any of its nodes did.
    sum.failed = sum.failed || rep.failed;
    dice::log::info(rep.node, "report " + dice::to_json(rep));
  }
  collect_results(*run, sum);
  demo::write_eval_plot(opts.out, run->evals, "DQN CartPole-v1",
                        opts.stop_value, opts.plot, evaluator_node);
  write_summary(opts, sum, "summary.json");
  return sum;
}

void set_threads(int n) {
  torch::set_num_threads(std::max(n, 1));
}

} // namespace dqn
