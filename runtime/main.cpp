#include "dice/runtime/main.hpp"

#include "dice/core/errc.hpp"
#include "dice/process/fork_server.hpp"
#include "dice/process/spawn.hpp"
#include "runtime/cli.hpp"

#include "caf/config_value.hpp"
#include "caf/settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace dice::detail {

namespace {

/// Reads the protected option set of any actor_system_config (a member
/// pointer taken through a derived class is one of the base).
struct config_options : caf::actor_system_config {
  static const caf::config_option_set& of(const caf::actor_system_config& x) {
    return x.*(&config_options::custom_options_);
  }
};

} // namespace

void start_process(int& argc, char**& argv) {
  process::die_with_parent_if_asked();
  process::serve_forks_if_asked(argc, argv);
}

int parse_options(caf::actor_system_config& cfg, int argc, char** argv,
                  bool& deterministic) {
  std::string program = argc > 0 ? argv[0] : "program";
  program = program.substr(program.rfind('/') + 1);
  auto args = normalize_cli(config_options::of(cfg),
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
  deterministic = caf::get_or(cfg, "dice.deterministic", false);
  return -1;
}

} // namespace dice::detail
