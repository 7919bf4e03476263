// dice_interop_node: a C++ node for the Python interop tests
// (tests/python/test_interop.py). Its model is torch.nn.Linear(4, 2)'s
// ("weight", "bias"), and its context travels as dice values
// (dice::pack_values), so Python nodes of the same cluster load its model
// and read its trajectories, and it reads theirs.
//
// learner:   each iteration unpacks what arrived (dicts {"obs": float32[4],
//            "src": str}), logs "learner got N items (python P, cpp C)",
//            adds 1 to the bias and runs --iterations iterations.
// collector: sends one {"obs": ones(4) * node, "src": "cpp"} per iteration
//            and logs the bias it holds.
// evaluator: logs the bias it holds.
// --hostile makes collectors send what a Python node must refuse.
// --hidden=K makes the model Linear(K, K) and --quiet drops the lines for
// a JSON timing line of the learner's (bench/run's Python rows).

#include "dice/dice.hpp"

#include <boost/serialization/vector.hpp>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

namespace {

struct config : dice::run_config {
  std::int64_t iterations = 5;
  std::int64_t hidden = 0;
  bool quiet = false;
  bool hostile = false;
  config() {
    // As dice's Python nodes (python/src/run.cpp): idle CAF workers wait
    // instead of spinning, so the C++ and Python timings compare.
    set("work-stealing.aggressive-poll-attempts", 0);
    set("work-stealing.moderate-poll-attempts", 0);
    opt_group{custom_options_, "global"}
      .add(iterations, "iterations", "learner iterations")
      .add(hidden, "hidden", "model: Linear(hidden, hidden) (0: Linear(4, 2))")
      .add(quiet, "quiet",
           "no line per iteration; the learner prints its timing as JSON")
      .add(hostile, "hostile",
           "collectors send Boost archives as trajectories and garbage as "
           "a 'tick' event (what a Python node must refuse and survive)");
  }
};

/// Learner iterations before the clock starts (--quiet).
constexpr std::int64_t warmup = 2;

float bias0(const torch::nn::Linear& net) {
  return net->bias[0].item<float>();
}

dice::middleware learn(torch::nn::Linear net, std::uint32_t node,
                       const config& cfg) {
  dice::middleware m;
  m.name = "learn";
  auto t0 = std::make_shared<std::chrono::steady_clock::time_point>();
  auto items_seen = std::make_shared<std::int64_t>(0);
  m.before = [net, node, t0, items_seen, iterations = cfg.iterations,
              quiet = cfg.quiet](dice::context& ctx) -> dice::step {
    auto items = dice::unpack_values(ctx.trajectories);
    if (!items)
      throw std::runtime_error("bad trajectories: "
                               + dice::render(items.error()));
    std::int64_t python = 0;
    std::int64_t cpp = 0;
    for (auto& x : *items) {
      auto obs = x.find("obs");
      auto src = x.find("src");
      if (obs == nullptr || obs->kind != dice::value_kind::array
          || obs->array.type != dice::dtype::float32
          || obs->array.shape != std::vector<std::int64_t>{4} || src == nullptr)
        throw std::runtime_error("an item is not {obs: float32[4], src}");
      (src->text == "python" ? python : cpp) += 1;
    }
    if (ctx.total_step == warmup)
      *t0 = std::chrono::steady_clock::now();
    else if (ctx.total_step > warmup)
      *items_seen += static_cast<std::int64_t>(items->size());
    if (!quiet)
      dice::log::info(node, "learner got {} items (python {}, cpp {})",
                      items->size(), python, cpp);
    torch::NoGradGuard no_grad;
    net->bias.add_(1.0);
    ctx.train_iter += 1;
    if (quiet && ctx.total_step == iterations - 1) {
      std::chrono::duration<double> s = std::chrono::steady_clock::now() - *t0;
      std::cout << R"({"bench": "learner", "rounds": )"
                << iterations - 1 - warmup << R"(, "seconds": )" << s.count()
                << R"(, "items": )" << *items_seen << "}" << std::endl;
    }
    return dice::proceed;
  };
  return m;
}

dice::middleware collect(torch::nn::Linear net, std::uint32_t node, bool quiet,
                         bool hostile) {
  dice::middleware m;
  m.name = "collect";
  auto services = std::make_shared<dice::node_services*>(nullptr);
  m.attach = [services](dice::node_services& s) {
    *services = &s;
  };
  m.before = [net, node, quiet, hostile,
              services](dice::context& ctx) -> dice::step {
    if (!quiet)
      dice::log::info(node, "collector bias {}", bias0(net));
    if (hostile) {
      ctx.trajectories = {dice::pack(std::vector<int>{1, 2, 3}, node)};
      ctx.env_step += 3;
      dice::payload garbage{dice::shared_bytes{std::vector<std::uint8_t>{
                              'd', 'v', 'l', 1, 'l', 0xff, 0xff}},
                            1, node, -1};
      (*services)->emit(dice::topic<dice::payload>{"task.tick"}, garbage);
      return dice::proceed;
    }
    auto obs = std::make_shared<std::vector<float>>(4,
                                                    static_cast<float>(node));
    dice::value_array a;
    a.type = dice::dtype::float32;
    a.shape = {4};
    a.data = reinterpret_cast<const std::uint8_t*>(obs->data());
    a.nbytes = 4 * sizeof(float);
    a.owner = obs;
    auto item = dice::value::dict({"obs", "src"},
                                  {dice::value::of(std::move(a)),
                                   dice::value::of(std::string{"cpp"})});
    auto packed = dice::pack_values({item}, node, ctx.model_version);
    if (!packed)
      throw std::runtime_error(dice::render(packed.error()));
    ctx.trajectories = {std::move(*packed)};
    ctx.env_step += 1;
    return dice::proceed;
  };
  return m;
}

dice::middleware watch(torch::nn::Linear net, std::uint32_t node, bool quiet) {
  dice::middleware m;
  m.name = "watch";
  m.before = [net, node, quiet](dice::context& ctx) -> dice::step {
    if (!quiet)
      dice::log::info(node, "evaluator bias {} train_iter {}", bias0(net),
                      ctx.train_iter);
    return dice::proceed;
  };
  return m;
}

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(
    argc, argv, [](dice::node_setup& n, const config& cfg) {
      torch::manual_seed(0);
      torch::nn::Linear net = cfg.hidden > 0
        ? torch::nn::Linear{cfg.hidden, cfg.hidden}
        : torch::nn::Linear{4, 2};
      n.use(dice::context_exchanger());
      n.use(dice::model_exchanger(dice::model_port_of(net.ptr())));
      switch (n.role()) {
        case dice::role::learner:
          n.use(learn(net, n.id(), cfg));
          if (cfg.iterations > 0)
            n.max_step(cfg.iterations);
          break;
        case dice::role::evaluator: n.use(watch(net, n.id(), cfg.quiet)); break;
        default: n.use(collect(net, n.id(), cfg.quiet, cfg.hostile));
      }
    });
}
