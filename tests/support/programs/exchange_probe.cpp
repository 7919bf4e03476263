// dice_exchange_probe: the tests' cluster program. hello_exchange's
// pipeline (a learner training an MLP on what collectors send, an evaluator
// that only receives) plus what tests observe and steer: trace lines of
// every collection, training and publication, the storage loader, and how
// many iterations each role runs. Process tests start it as nodes of real
// clusters (dice-launch, by hand); bench/startup times its first
// evaluation.
//
//   dice_exchange_probe --steps=20 --collectors=2 --trace
//   dice-launch --workers 4 -- dice_exchange_probe --storage=file

#include "dice/dice.hpp"

#include <boost/serialization/vector.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
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

constexpr int steps_per_iteration = 16;

struct config : dice::run_config {
  std::int64_t steps = 20;
  std::int64_t collector_steps = 0;
  bool trace = false;
  std::string storage = "none";
  std::string storage_dir = "/tmp/dice-storage";
  std::int64_t inline_below = -1;
  config() {
    collectors = 2;
    opt_group{custom_options_, "global"}
      .add(steps, "steps", "learner iterations")
      .add(collector_steps, "collector-steps",
           "collector iterations (0: until the learner finishes)")
      .add(trace, "trace",
           "log every collection's model version, every training's env_step "
           "and every publication")
      .add(storage, "storage",
           "context through a storage loader: none, file or shm")
      .add(storage_dir, "storage-dir", "directory of --storage=file")
      .add(inline_below, "inline-below",
           "deltas below this many payload bytes skip the storage (-1: the "
           "loader's default, 0: every delta is stored)");
  }
};

/// Collector: picks actions with its current model, emits transitions.
dice::middleware collect(torch::nn::Sequential net, std::uint32_t node,
                         bool trace) {
  auto rng = std::make_shared<std::mt19937>(node);
  dice::middleware m;
  m.name = "collect";
  m.before = [net, rng, node, trace](dice::context& ctx) mutable -> dice::step {
    if (trace)
      dice::log::info(node,
                      "collect iteration {} model_version {} train_iter "
                      "{}",
                      ctx.total_step, ctx.model_version, ctx.train_iter);
    std::normal_distribution<float> noise;
    auto obs = torch::empty({steps_per_iteration, 4});
    auto acc = obs.accessor<float, 2>();
    for (int i = 0; i < steps_per_iteration; ++i)
      for (int j = 0; j < 4; ++j)
        acc[i][j] = noise(*rng);
    torch::NoGradGuard no_grad;
    auto actions = net->forward(obs).argmax(1);
    std::vector<transition> items(steps_per_iteration);
    for (int i = 0; i < steps_per_iteration; ++i) {
      auto& t = items[i];
      t.obs.assign(obs[i].data_ptr<float>(), obs[i].data_ptr<float>() + 4);
      t.action = actions[i].item<std::int64_t>();
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
/// exchanger spooled this iteration's delta and handed it to the router:
/// tests count what a collector killed later had published (and, by its
/// incarnation, which of its spooled deltas its successor recovered).
dice::middleware published_trace(std::uint32_t node) {
  auto incarnation = std::make_shared<std::uint64_t>(0);
  dice::middleware m;
  m.name = "published_trace";
  m.attach = [incarnation](dice::node_services& svc) {
    *incarnation = svc.incarnation();
  };
  m.after = [node, incarnation](dice::context& ctx) {
    dice::log::info(node, "published iteration {} env_step {} incarnation {}",
                    ctx.total_step, ctx.env_step, *incarnation);
  };
  return m;
}

/// Learner: one Adam step on everything that arrived this iteration.
dice::middleware train(torch::nn::Sequential net, std::uint32_t node,
                       bool trace) {
  auto opt = std::make_shared<torch::optim::Adam>(
    net->parameters(), torch::optim::AdamOptions(1e-2));
  dice::middleware m;
  m.name = "train";
  m.before = [net, opt, node, trace](dice::context& ctx) mutable -> dice::step {
    if (trace)
      dice::log::info(node, "train iteration {} env_step {}", ctx.total_step,
                      ctx.env_step);
    auto items = dice::unpack<transition>(ctx.trajectories);
    if (!items) {
      dice::log::error(node,
                       "bad trajectories: " + dice::render(items.error()));
      return dice::proceed;
    }
    if (!items->empty()) {
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
    }
    ctx.train_iter += 1;
    return dice::proceed;
  };
  return m;
}

/// Evaluator: nothing to evaluate; with --trace it logs each iteration
/// (bench/startup reads the first to time the start-up).
dice::middleware evaluate(std::uint32_t node, bool trace) {
  auto m = dice::void_middleware("evaluate");
  if (trace)
    m.before = [node](dice::context& ctx) -> dice::step {
      dice::log::info(node, "evaluate iteration {}", ctx.total_step);
      return dice::proceed;
    };
  return m;
}

/// DI-engine's `storage_loader=`: with --storage=file|shm collectors store
/// their context and send references; every node loads them through its own
/// loader.
dice::context_exchanger_options context_options(dice::node_setup& n,
                                                const config& cfg) {
  dice::context_exchanger_options opts;
  if (cfg.storage == "none")
    return opts;
  dice::loader_options lo;
  lo.kind = cfg.storage == "shm" ? dice::storage_kind::shm
                                 : dice::storage_kind::file;
  lo.dirname = cfg.storage_dir;
  lo.node = n.id();
  if (cfg.inline_below >= 0)
    lo.inline_below = static_cast<std::size_t>(cfg.inline_below);
  opts.storage_loader = dice::spawn_storage_loader(n.system(), lo);
  return opts;
}

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(
    argc, argv, [](dice::node_setup& n, const config& cfg) {
      if (cfg.storage != "none" && cfg.storage != "file"
          && cfg.storage != "shm")
        throw std::invalid_argument("bad --storage=" + cfg.storage
                                    + " (none, file or shm)");
      torch::manual_seed(0);
      auto net = dice::rl::mlp(4, {32}, 2);
      auto port = dice::model_port_of(net.ptr());
      auto role = n.role();
      // A learner of a cluster greets collectors that wait for its model (a
      // restarted one would otherwise wait for data while they wait for it).
      if (role == dice::role::learner && n.distributed())
        n.use(dice::learner_hello(port));
      if (cfg.trace && role == dice::role::collector)
        n.use(published_trace(n.id()));
      n.use(dice::context_exchanger(context_options(n, cfg)))
        .use(dice::model_exchanger(port));
      if (role == dice::role::learner) {
        n.use(train(net, n.id(), cfg.trace));
        n.max_step(cfg.steps);
      } else if (role == dice::role::collector) {
        n.use(collect(net, n.id(), cfg.trace));
        n.max_step(cfg.collector_steps);
      } else {
        n.use(evaluate(n.id(), cfg.trace));
      }
    });
}
