#pragma once

// DICE_MAIN(config): like CAF_MAIN, but the process exits with caf_main's
// return value (CAF 0.17's exec_main always exits 0), and
// `--dice.deterministic` switches the scheduler to CAF's single-threaded
// test coordinator before the actor system starts (dice::run_local then
// drives it), so a seeded embedded run is reproducible.

#include "dice/actors/node.hpp"
#include "dice/process/spawn.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/atom.hpp"
#include "caf/config_value.hpp"
#include "caf/settings.hpp"

#include <cstdlib>
#include <iostream>
#include <type_traits>

namespace dice {

/// Parses the options into a `Config`, starts the actor system and returns
/// what `fun(sys, cfg)` returns.
template <class Config, class F>
int exec_main(F fun, int argc, char** argv) {
  process::die_with_parent_if_asked();
  Config cfg;
  if (auto err = cfg.parse(argc, argv, "caf-application.ini")) {
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
