#pragma once

// DICE_MAIN(config): like CAF_MAIN, but the process exits with caf_main's
// return value (CAF 0.17's exec_main always exits 0), options take
// `--key value` as well as `--key=value` (CAF 0.17 reads only the latter)
// and an unknown one is named, and `--dice.deterministic` switches the
// scheduler to CAF's single-threaded test coordinator before the actor
// system starts (dice::run_local then drives it), so a seeded embedded run
// is reproducible.

#include "dice/core/errc.hpp"
#include "dice/process/fork_server.hpp"
#include "dice/process/spawn.hpp"
#include "dice/runtime/cli.hpp"
#include "dice/runtime/node.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/atom.hpp"
#include "caf/config_value.hpp"
#include "caf/settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

namespace dice {

namespace detail {

/// Reads the protected option set of any actor_system_config (a member
/// pointer taken through a derived class is one of the base).
struct config_options : caf::actor_system_config {
  static const caf::config_option_set& of(const caf::actor_system_config& x) {
    return x.*(&config_options::custom_options_);
  }
};

} // namespace detail

/// Parses the options into a `Config`, starts the actor system and returns
/// what `fun(sys, cfg)` returns.
template <class Config, class F>
int exec_main(F fun, int argc, char** argv) {
  process::die_with_parent_if_asked();
  // Started by `dice-launch --fork-server`: only forked nodes return, each
  // with its own arguments (libraries loaded once, before any thread).
  process::serve_forks_if_asked(argc, argv);
  Config cfg;
  std::string program = argc > 0 ? argv[0] : "program";
  program = program.substr(program.rfind('/') + 1);
  auto args = normalize_cli(detail::config_options::of(cfg),
                            std::vector<std::string>(argv + std::min(argc, 1),
                                                     argv + argc));
  if (!args) {
    std::cerr << program << ": " << render(args.error()) << std::endl;
    return EXIT_FAILURE;
  }
  if (auto err = cfg.parse(std::move(*args), "caf-application.ini")) {
    std::cerr << "error while parsing CLI and file options: "
              << caf::actor_system_config::render(err) << std::endl;
    return EXIT_FAILURE;
  }
  if (cfg.cli_helptext_printed)
    return EXIT_SUCCESS;
  bool deterministic = caf::get_or(cfg, "dice.deterministic", false);
  if constexpr (std::is_base_of<node_system_config, Config>::value)
    deterministic = deterministic || cfg.deterministic;
  if (deterministic)
    cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  return fun(sys, cfg);
}

} // namespace dice

/// Defines `main` for a program whose `caf_main(caf::actor_system&, const
/// config_type&)` returns its exit code.
#define DICE_MAIN(config_type)                                                 \
  int main(int argc, char** argv) {                                            \
    return ::dice::exec_main<config_type>(caf_main, argc, argv);               \
  }
