// hello_exchange: the smallest complete dice program. Collectors act with
// the learner's latest MLP on random observations and send what they did;
// the learner trains on it and sends the MLP back. Each node prints one
// JSON line with its final counters.
// One process: `hello_exchange --collectors=2`; one process per node:
// `dice-launch --workers 4 -- hello_exchange`.

#include <dice/dice.hpp>

namespace {

/// One collector iteration, column by column (a column is one byte block).
struct batch {
  std::vector<float> obs; // [n, 4]
  std::vector<std::int64_t> action;
  std::vector<float> reward;
  template <class Archive>
  void serialize(Archive& ar, unsigned) {
    ar& obs& action& reward;
  }
};

constexpr std::int64_t steps_per_iteration = 16;
/// A tensor's values as a column.
template <class T>
std::vector<T> column(const torch::Tensor& x) {
  return {x.data_ptr<T>(), x.data_ptr<T>() + x.numel()};
}

/// Collector: acts with its current model, puts one batch into the context.
dice::middleware collect(torch::nn::Sequential net, std::uint32_t node) {
  dice::middleware m;
  m.before = [net, node](dice::context& ctx) mutable -> dice::step {
    torch::NoGradGuard no_grad;
    auto obs = torch::randn({steps_per_iteration, 4});
    auto act = net->forward(obs).argmax(1);
    // Reward the action that matches the sign of the first feature.
    auto rew = (obs.select(1, 0).gt(0) == act.eq(1)).to(torch::kFloat);
    batch b{column<float>(obs), column<std::int64_t>(act), column<float>(rew)};
    ctx.env_step += steps_per_iteration;
    ctx.env_episode += 1;
    ctx.trajectories = {
      dice::pack(std::vector<batch>{b}, node, ctx.model_version)};
    return dice::proceed;
  };
  return m;
}

/// Learner: one Adam step on everything that arrived this iteration.
dice::middleware train(torch::nn::Sequential net) {
  auto opt = std::make_shared<torch::optim::Adam>(net->parameters(), 1e-2);
  dice::middleware m;
  m.before = [net, opt](dice::context& ctx) mutable -> dice::step {
    auto batches = dice::unpack<batch>(ctx.trajectories);
    if (!batches) // a peer's bytes: refused and counted, never a crash
      return dice::proceed;
    for (auto& b : *batches) {
      auto n = static_cast<std::int64_t>(b.action.size());
      auto obs = torch::from_blob(b.obs.data(), {n, 4});
      auto act = torch::from_blob(b.action.data(), {n, 1}, torch::kLong);
      auto rew = torch::from_blob(b.reward.data(), {n});
      auto loss = torch::mse_loss(net->forward(obs).gather(1, act).squeeze(1),
                                  rew);
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
    ctx.train_iter += 1;
    return dice::proceed;
  };
  return m;
}

struct config : dice::run_config {
  std::int64_t steps = 20;
  config() {
    collectors = 2;
    opt_group{custom_options_, "global"}.add(steps, "steps",
                                             "learner iterations (20)");
  }
};

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(
    argc, argv, [](dice::node_setup& n, const config& cfg) {
      torch::manual_seed(0); // every node starts from the same weights
      auto net = dice::rl::mlp(4, {32}, 2);
      auto port = dice::model_port_of(net.ptr());
      // A restarted learner greets the collectors waiting for its model.
      if (n.role() == dice::role::learner && n.restarts() > 0)
        n.use(dice::learner_hello(port));
      n.use(dice::context_exchanger()).use(dice::model_exchanger(port));
      if (n.role() == dice::role::learner)
        n.use(train(net)).max_step(cfg.steps);
      else if (n.role() == dice::role::collector)
        n.use(collect(net, n.id()));
    });
}
