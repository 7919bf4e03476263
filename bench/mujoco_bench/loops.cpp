// mujoco_bench sim and bare: the limits dice is measured against.

#include "dice/mujoco/hopper.hpp"
#include "dice/rl/cpu_time.hpp"

#include "bench_options.hpp"
#include "mujoco_bench.hpp"
#include <torch/torch.h>

#include <chrono>
#include <random>

namespace dice::bench::mujoco {

std::vector<std::unique_ptr<dice::env>> make_hoppers(std::int64_t n) {
  std::vector<std::unique_ptr<dice::env>> envs;
  for (std::int64_t i = 0; i < n; ++i)
    envs.push_back(
      std::make_unique<dice::envs::hopper>(static_cast<std::uint64_t>(i)));
  return envs;
}

dice::rl::actor_critic make_policy(std::int64_t hidden, std::int64_t layers) {
  dice::envs::hopper probe;
  dice::rl::actor_critic_options opts;
  opts.hidden.assign(static_cast<std::size_t>(layers), hidden);
  torch::manual_seed(0);
  return dice::rl::actor_critic{probe.observation_space(), probe.action_space(),
                                opts};
}

std::int64_t state_bytes(dice::rl::actor_critic& net) {
  std::int64_t n = 0;
  for (auto& p : net->parameters())
    n += p.numel() * static_cast<std::int64_t>(p.element_size());
  for (auto& b : net->buffers())
    n += b.numel() * static_cast<std::int64_t>(b.element_size());
  return n;
}

namespace {

using clk = std::chrono::steady_clock;

const std::vector<option_spec> specs{
  {"seconds", value_kind::real, "how long to step (default 3)", "S"},
  {"envs", value_kind::integer, "envs stepped as one batch (default 8)", "N"},
  {"hidden", value_kind::integer, "width of the hidden layers (default 64)",
   "H"},
  {"layers", value_kind::integer, "hidden layers (default 2)", "L"},
};

const std::vector<mode_spec> modes{
  {"sim", "the envs alone stepping random actions"},
  {"bare", "the envs and the policy's batched forward pass, no dice"},
  {"dice", "the same through dice (options: dice::run's, --seconds, --warmup)"},
};

// Steps every env once with `act` filling the actions [N, 3]; resets an
// env whose episode ended. Returns the steps taken.
template <class Act>
std::int64_t step_all(std::vector<std::unique_ptr<dice::env>>& envs,
                      std::vector<std::int64_t>& lengths,
                      std::vector<float>& obs, std::vector<float>& actions,
                      Act&& act, double& env_cpu) {
  act();
  dice::rl::cpu_span span{env_cpu};
  for (std::size_t i = 0; i < envs.size(); ++i) {
    dice::action_view a{0, actions.data() + 3 * i, 3};
    auto r = envs[i]->step(a, obs.data() + 11 * i);
    if (r.terminated || ++lengths[i] >= envs[i]->max_episode_steps()) {
      envs[i]->reset(std::nullopt, obs.data() + 11 * i);
      lengths[i] = 0;
    }
  }
  return static_cast<std::int64_t>(envs.size());
}

} // namespace

int loops_main(int argc, char** argv) {
  auto parsed = parse_options(
    "mujoco_bench", "Hopper-v4 through dice against the simulator's speed.",
    specs, modes, argc, argv);
  if (auto* code = std::get_if<int>(&parsed))
    return *code;
  auto& given = std::get<option_values>(parsed);
  auto seconds = given.real("seconds", 3);
  auto n = given.integer("envs", 8);
  auto hidden = given.integer("hidden", 64);
  auto layers = given.integer("layers", 2);
  torch::set_num_threads(1);
  auto envs = make_hoppers(n);
  std::vector<float> obs(static_cast<std::size_t>(11 * n));
  std::vector<float> actions(static_cast<std::size_t>(3 * n));
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < envs.size(); ++i)
    envs[i]->reset(i, obs.data() + 11 * i);
  std::mt19937_64 gen{1};
  std::function<void()> act;
  double inference_cpu = 0;
  auto net = make_policy(hidden, layers);
  torch::NoGradGuard no_grad;
  auto low = torch::full({3}, -1.0f), high = torch::full({3}, 1.0f);
  if (given.mode() == "sim") {
    std::uniform_real_distribution<float> u{-1.0f, 1.0f};
    act = [&] {
      for (auto& a : actions)
        a = u(gen);
    };
  } else {
    act = [&] {
      dice::rl::cpu_span span{inference_cpu};
      auto x = torch::from_blob(obs.data(), {n, 11});
      auto r = net->act(x, gen);
      auto clipped = torch::max(torch::min(r.actions, high), low).contiguous();
      std::copy_n(clipped.data_ptr<float>(), 3 * n, actions.begin());
    };
  }
  // A short warm-up (allocations, caches), then the timed loop.
  double env_cpu = 0;
  for (int i = 0; i < 50; ++i)
    step_all(envs, lengths, obs, actions, act, env_cpu);
  env_cpu = inference_cpu = 0;
  std::int64_t steps = 0;
  auto cpu0 = dice::rl::thread_cpu_seconds();
  auto t0 = clk::now();
  auto deadline = t0 + std::chrono::duration<double>(seconds);
  while (clk::now() < deadline)
    steps += step_all(envs, lengths, obs, actions, act, env_cpu);
  auto secs = std::chrono::duration<double>(clk::now() - t0).count();
  auto cpu = dice::rl::thread_cpu_seconds() - cpu0;
  nlohmann::ordered_json j{{"mode", given.mode()},
                           {"envs", n},
                           {"steps", steps},
                           {"seconds", secs},
                           {"steps_per_s", steps / secs},
                           {"steps_per_cpu_s", steps / std::max(cpu, 1e-9)},
                           {"env_cpu_s", env_cpu},
                           {"inference_cpu_s", inference_cpu}};
  if (given.mode() == "bare") {
    j["hidden"] = hidden;
    j["layers"] = layers;
    j["model_bytes"] = state_bytes(net);
  }
  print_json(j);
  return 0;
}

} // namespace dice::bench::mujoco
