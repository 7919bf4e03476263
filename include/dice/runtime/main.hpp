#pragma once

// DICE_MAIN(config): like CAF_MAIN, but the process exits with caf_main's
// return value (CAF 0.17's exec_main always exits 0), options take
// `--key value` as well as `--key=value` (CAF 0.17 reads only the latter)
// and an unknown one is named, and `--dice.deterministic` switches the
// scheduler to CAF's single-threaded test coordinator before the actor
// system starts (dice::run_local then drives it), so a seeded embedded run
// is reproducible. dice::run (dice/runtime/run.hpp) starts the same way.

#include "dice/runtime/node_config.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include <type_traits>

namespace dice::detail {

/// What every dice program does first: dies with a parent that asked for it
/// (dice-launch) and, started by `dice-launch --fork-server`, serves forks
/// (only forked nodes return, each with its own arguments).
void start_process(int& argc, char**& argv);

/// Parses the command line (and caf-application.ini) into `cfg`; -1 to go
/// on, else the exit code (a bad option is named on stderr; --help exits 0).
/// `deterministic` is set from --dice.deterministic.
int parse_options(caf::actor_system_config& cfg, int argc, char** argv,
                  bool& deterministic);

} // namespace dice::detail

namespace dice {

/// Parses the options into a `Config`, starts the actor system and returns
/// what `fun(sys, cfg)` returns.
template <class Config, class F>
int exec_main(F fun, int argc, char** argv) {
  detail::start_process(argc, argv);
  Config cfg;
  bool deterministic = false;
  if (auto rc = detail::parse_options(cfg, argc, argv, deterministic); rc >= 0)
    return rc;
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
