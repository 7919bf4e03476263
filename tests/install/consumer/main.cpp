// Runs a learner and a collector in one process with an installed dice and
// prints the learner's env_step.

#include "dice/runtime/main.hpp"

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include <iostream>

namespace {

struct config : caf::actor_system_config {
  config() {
    dice::add_message_types(*this);
  }
};

int caf_main(caf::actor_system& sys, const config&) {
  dice::middleware collect;
  collect.name = "collect";
  collect.before = [](dice::context& ctx) -> dice::step {
    ctx.env_step += 5;
    ctx.trajectories = {dice::pack(std::vector<int>{1, 2, 3, 4, 5}, 1)};
    return dice::proceed;
  };
  std::vector<dice::local_node> nodes;
  dice::pipeline learner;
  learner.use(dice::context_exchanger());
  nodes.push_back({0, {dice::role::learner}, std::move(learner), 4});
  dice::pipeline collector;
  collector.use(dice::context_exchanger()).use(std::move(collect));
  nodes.push_back({1, {dice::role::collector}, std::move(collector), 0});
  dice::local_run_options opts;
  opts.print_reports = false;
  auto reports = dice::run_local(sys, std::move(nodes), opts);
  if (!reports)
    return 1;
  std::cout << "learner env_step " << reports->front().env_step << '\n';
  return 0;
}

} // namespace

DICE_MAIN(config)
