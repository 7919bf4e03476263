#pragma once

// A PPO run through the library in this process: dice::run with the
// options a command line gives, each node composed by dice::rl::use_ppo.

#include "dice/dice.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace dice::test {

/// The RL options plus PPO's, with examples/ppo_cartpole's defaults.
struct ppo_run_config : rl::run_config {
  rl::ppo_cli ppo;

  ppo_run_config() {
    max_env_steps = 300000;
    max_seconds = 120;
    stop_value = 475;
    eval_every = 2;
    envs_per_collector = 4;
    steps_per_collect = 64;
    models.periodical = true;
    models.stale_toleration = 2;
    ppo.add_to(custom_options_);
  }
};

/// Runs PPO on `make_env` with the command line `args`; the exit code.
inline int run_ppo(std::vector<std::string> args,
                   const vector_env::factory& make_env,
                   const std::string& title = "PPO test") {
  args.insert(args.begin(), "ppo_test");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  return run<ppo_run_config>(static_cast<int>(argv.size()), argv.data(),
                             [&](node_setup& n, const ppo_run_config& cfg) {
                               rl::use_ppo(n, cfg, cfg.ppo, make_env, title);
                             });
}

/// The JSON object in `p` (empty if none).
inline nlohmann::json read_json_file(const std::filesystem::path& p) {
  std::ifstream f{p};
  auto j = nlohmann::json::parse(f, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

/// Every line of a metrics file, parsed.
inline std::vector<nlohmann::json>
read_json_lines(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream f{p};
  std::string line;
  while (std::getline(f, line))
    out.push_back(nlohmann::json::parse(line, nullptr, false));
  return out;
}

} // namespace dice::test
