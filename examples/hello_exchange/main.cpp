// hello_exchange: a learner, an evaluator and N collectors exchange context
// and models. Collectors act with the learner's latest MLP on random
// observations; the learner trains the MLP on what they send.
//
//   hello_exchange --steps=20 --collectors=2        (one process, embedded)
//   dice-launch --workers 4 -- hello_exchange       (one process per node)
//   hello_exchange --dice.node-id=1 --dice.attach-to=host:port   (by hand)
//
// Node 0 is the learner, node 1 the evaluator (with more than 2 nodes), the
// others collectors. Each role actor prints one JSON line with its final
// counters.

#include "dice/runtime/main.hpp"

#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/learner_hello.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/node.hpp"
#include "dice/torch/model.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include <boost/serialization/vector.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

namespace {

/// One environment step as the collectors report it.
struct transition {
  std::vector<float> obs;
  std::int64_t action = 0;
  float reward = 0;
  bool done = false;

  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& obs& action& reward& done;
  }
};

/// The small MLP every node holds a copy of.
struct mlp_impl : torch::nn::Module {
  mlp_impl()
    : fc1(register_module("fc1", torch::nn::Linear(4, 32))),
      fc2(register_module("fc2", torch::nn::Linear(32, 2))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2(torch::relu(fc1(x)));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE_IMPL(mlp, mlp_impl);

constexpr int steps_per_iteration = 16;

/// Collector: picks actions with its current model, emits transitions.
dice::middleware collect(mlp net, std::uint32_t node, bool trace = false) {
  auto rng = std::make_shared<std::mt19937>(node);
  dice::middleware m;
  m.name = "collect";
  m.before = [net, rng, node, trace](dice::context& ctx) mutable -> dice::step {
    // Tests read these lines to see which model and train_iter acted.
    if (trace)
      dice::log::info(node,
                      "collect iteration " + std::to_string(ctx.total_step)
                        + " model_version " + std::to_string(ctx.model_version)
                        + " train_iter " + std::to_string(ctx.train_iter));
    std::normal_distribution<float> noise;
    std::vector<transition> items(steps_per_iteration);
    auto obs = torch::empty({steps_per_iteration, 4});
    auto acc = obs.accessor<float, 2>();
    for (int i = 0; i < steps_per_iteration; ++i)
      for (int j = 0; j < 4; ++j)
        acc[i][j] = noise(*rng);
    torch::NoGradGuard no_grad;
    auto actions = net->forward(obs).argmax(1);
    for (int i = 0; i < steps_per_iteration; ++i) {
      auto& t = items[i];
      t.obs.assign(obs[i].data_ptr<float>(), obs[i].data_ptr<float>() + 4);
      t.action = actions[i].item<std::int64_t>();
      // Reward the action that matches the sign of the first feature.
      t.reward = (t.obs[0] > 0) == (t.action == 1) ? 1.0f : 0.0f;
      t.done = i + 1 == steps_per_iteration;
    }
    ctx.env_step += steps_per_iteration;
    ctx.env_episode += 1;
    ctx.trajectories = {dice::pack(items, node, ctx.model_version)};
    ctx.trajectory_end_idx = {steps_per_iteration - 1};
    return dice::proceed;
  };
  return m;
}

/// First in a collector's pipeline, so its after-part runs once the context
/// exchanger spooled this iteration's delta and handed it to the router: tests
/// count what a collector killed later had published (and, by its incarnation,
/// which of its spooled deltas its successor recovered).
dice::middleware published_trace(std::uint32_t node) {
  auto incarnation = std::make_shared<std::uint64_t>(0);
  dice::middleware m;
  m.name = "published_trace";
  m.attach = [incarnation](dice::node_services& svc) {
    *incarnation = svc.incarnation();
  };
  m.after = [node, incarnation](dice::context& ctx) {
    dice::log::info(node,
                    "published iteration " + std::to_string(ctx.total_step)
                      + " env_step " + std::to_string(ctx.env_step)
                      + " incarnation " + std::to_string(*incarnation));
  };
  return m;
}

/// Learner: one Adam step on everything that arrived this iteration.
dice::middleware train(mlp net, std::uint32_t node, bool trace = false) {
  auto opt = std::make_shared<torch::optim::Adam>(
    net->parameters(), torch::optim::AdamOptions(1e-2));
  dice::middleware m;
  m.name = "train";
  m.before = [net, opt, node, trace](dice::context& ctx) mutable -> dice::step {
    // Tests read these lines to see when data arrived.
    if (trace)
      dice::log::info(node,
                      "train iteration " + std::to_string(ctx.total_step)
                        + " env_step " + std::to_string(ctx.env_step));
    auto items = dice::unpack<transition>(ctx.trajectories);
    if (!items) {
      dice::log::error(node,
                       "bad trajectories: " + dice::render(items.error()));
      return dice::proceed;
    }
    if (items->empty())
      return dice::proceed;
    auto n = static_cast<std::int64_t>(items->size());
    auto obs = torch::empty({n, 4});
    auto act = torch::empty({n}, torch::kLong);
    auto rew = torch::empty({n});
    for (std::int64_t i = 0; i < n; ++i) {
      obs[i] = torch::from_blob((*items)[i].obs.data(), {4}).clone();
      act[i] = (*items)[i].action;
      rew[i] = (*items)[i].reward;
    }
    auto q = net->forward(obs).gather(1, act.unsqueeze(1)).squeeze(1);
    auto loss = torch::mse_loss(q, rew);
    opt->zero_grad();
    loss.backward();
    opt->step();
    ctx.train_iter += 1;
    return dice::proceed;
  };
  return m;
}

/// Evaluator: nothing to evaluate here; with --trace it logs each iteration
/// (bench/startup reads the first to time the start-up).
dice::middleware evaluate(std::uint32_t node, bool trace) {
  auto m = dice::void_middleware("evaluate");
  if (trace)
    m.before = [node](dice::context& ctx) -> dice::step {
      dice::log::info(node,
                      "evaluate iteration " + std::to_string(ctx.total_step));
      return dice::proceed;
    };
  return m;
}

struct config : dice::node_system_config {
  std::int64_t steps = 20;
  std::uint32_t collectors = 2;
  std::int64_t collector_steps = 0;
  bool trace = false;
  std::string storage = "none";
  std::string storage_dir = "/tmp/dice-storage";
  config() {
    opt_group{custom_options_, "global"}
      .add(steps, "steps", "learner iterations")
      .add(collectors, "collectors", "number of collectors")
      .add(collector_steps, "collector-steps",
           "collector iterations (0: until the learner finishes)")
      .add(trace, "trace",
           "log every collection's model version and every training's "
           "env_step")
      .add(storage, "storage",
           "context through a storage loader: none, file or shm")
      .add(storage_dir, "storage-dir", "directory of --storage=file");
  }
};

/// DI-engine's `storage_loader=`: with --storage=file|shm collectors store
/// their context and send references; every node loads them through its own
/// loader.
dice::context_exchanger_options
context_options(caf::actor_system& sys, const config& cfg, std::uint32_t node) {
  dice::context_exchanger_options opts;
  if (cfg.storage == "none")
    return opts;
  dice::loader_options lo;
  lo.kind = cfg.storage == "shm" ? dice::storage_kind::shm
                                 : dice::storage_kind::file;
  lo.dirname = cfg.storage_dir;
  lo.node = node;
  opts.storage_loader = dice::spawn_storage_loader(sys, lo);
  return opts;
}

/// One node of a cluster: the pipeline of its role.
int run_node(caf::actor_system& sys, const config& cfg,
             const dice::node_config& ncfg) {
  auto node = dice::node::start(sys, ncfg);
  if (!node) {
    dice::log::error(ncfg.id, "cannot start: " + dice::render(node.error()));
    return 1;
  }
  auto id = node->id();
  auto roles = node->roles();
  // The node's "main": a role actor started again after a middleware threw
  // (--dice.max-restarts) gets fresh middleware around the same model.
  mlp net;
  auto make = [&sys, &cfg, net, id, roles] {
    dice::pipeline p;
    // A restarted learner greets collectors that wait for its model.
    if (roles.has(dice::role::learner))
      p.use(dice::learner_hello(dice::model_port_of(net.ptr())));
    if (cfg.trace && roles.has(dice::role::collector))
      p.use(published_trace(id));
    p.use(dice::context_exchanger(context_options(sys, cfg, id)))
      .use(dice::model_exchanger(dice::model_port_of(net.ptr())));
    if (roles.has(dice::role::learner))
      p.use(train(net, id, cfg.trace));
    else if (roles.has(dice::role::collector))
      p.use(collect(net, id, cfg.trace));
    else
      p.use(evaluate(id, cfg.trace));
    return p;
  };
  dice::node_run_options opts;
  opts.max_step = roles.has(dice::role::learner) ? cfg.steps
    : roles.has(dice::role::collector)           ? cfg.collector_steps
                                                 : 0;
  opts.rebuild = make;
  auto rep = node->run(make(), opts);
  node->stop();
  if (!rep) {
    dice::log::error(id, "run failed: " + dice::render(rep.error()));
    return 1;
  }
  if (rep->failed) {
    dice::log::error(id, "stopped: " + rep->stop_reason);
    return 1;
  }
  return 0;
}

int caf_main(caf::actor_system& sys, const config& cfg) {
  torch::manual_seed(0);
  if (cfg.storage != "none" && cfg.storage != "file" && cfg.storage != "shm") {
    dice::log::error(0,
                     "bad --storage=" + cfg.storage + " (none, file or shm)");
    return 1;
  }
  auto ncfg = dice::make_node_config(cfg);
  if (!ncfg) {
    dice::log::error(0, "bad node settings: " + dice::render(ncfg.error()));
    return 1;
  }
  if (ncfg->distributed)
    return run_node(sys, cfg, *ncfg);
  std::vector<dice::local_node> nodes;
  // Every node runs the same two exchangers plus its own work.
  // `work` makes a node's own middleware; a restarted node
  // (--dice.max-restarts) gets a fresh pipeline around the same model.
  auto add = [&](std::uint32_t id, dice::role r, mlp net,
                 std::function<dice::middleware()> work) {
    auto make = [&sys, &cfg, id, net, work] {
      dice::pipeline p;
      p.use(dice::context_exchanger(context_options(sys, cfg, id)))
        .use(dice::model_exchanger(dice::model_port_of(net.ptr())))
        .use(work());
      return p;
    };
    // The learner sets the pace: it runs --steps iterations and its finish
    // ends the others (which wait for its model and train_iter).
    auto max_step = r == dice::role::learner ? cfg.steps : 0;
    nodes.push_back(dice::local_node{id, {r}, make(), max_step, make});
  };
  mlp learner_net;
  add(0, dice::role::learner, learner_net, [learner_net] {
    return train(learner_net, 0);
  });
  add(1, dice::role::evaluator, mlp{}, [] {
    return dice::void_middleware("evaluate");
  });
  for (std::uint32_t i = 0; i < cfg.collectors; ++i) {
    mlp net;
    add(2 + i, dice::role::collector, net, [net, i] {
      return collect(net, 2 + i);
    });
  }
  dice::local_run_options opts;
  opts.max_restarts = ncfg->max_restarts;
  auto reports = dice::run_local(sys, std::move(nodes), opts);
  if (!reports) {
    dice::log::error(0, "run failed: " + dice::render(reports.error()));
    return 1;
  }
  for (auto& rep : *reports)
    if (rep.failed)
      return 1;
  return 0;
}

} // namespace

DICE_MAIN(config)
