#include "dice/runtime/run.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/node.hpp"
#include "dice/runtime/stop_signals.hpp"
#include "dice/storage/storage.hpp"

#include <chrono>
#include <exception>
#include <memory>
#include <string>

namespace dice {

run_config::run_config() {
  opt_group{custom_options_, "global"}
    .add(collectors, "collectors",
         "collector nodes of a one-process run (3; in a cluster the node "
         "settings decide)")
    .add(learners, "learners",
         "learner nodes of a one-process run, one data-parallel group when "
         "more than 1 (0: --dice.learners)");
}

std::optional<int> run_config::run_instead(caf::actor_system&) const {
  return std::nullopt;
}

role main_role(const role_set& roles) noexcept {
  for (auto r : {role::learner, role::evaluator, role::collector})
    if (roles.has(r))
      return r;
  return roles.empty() ? role::collector : role::fetcher;
}

node_setup::node_setup(caf::actor_system& sys, const node_config& cfg,
                       const run_config& options,
                       detail::process_state& process, std::uint32_t collectors,
                       std::int64_t restarts)
  : sys_(&sys), cfg_(&cfg), options_(&options), process_(&process),
    collectors_(collectors), restarts_(restarts) {
  // nop
}

bool node_setup::cluster_has(dice::role r) const {
  if (cfg_->roles.has(r))
    return true;
  for (std::uint32_t i = 0; i < cfg_->workers; ++i)
    if (default_roles(i, cfg_->workers, cfg_->learners).has(r))
      return true;
  return false;
}

void node_setup::print_report(bool on) {
  std::lock_guard<std::mutex> guard{process_->mtx};
  process_->print_reports = on;
}

void node_setup::deadline(caf::timespan d) {
  std::lock_guard<std::mutex> guard{process_->mtx};
  process_->deadline = d;
}

void node_setup::at_exit(std::function<void(const run_result&)> fn) {
  std::lock_guard<std::mutex> guard{process_->mtx};
  process_->at_exit.push_back(std::move(fn));
}

namespace {

using clock_type = std::chrono::steady_clock;

// Collectors among `workers` nodes with the default roles.
std::uint32_t count_collectors(std::uint32_t workers, std::uint32_t learners) {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < workers; ++i)
    if (default_roles(i, workers, learners).has(role::collector))
      ++n;
  return n;
}

// Builds one incarnation's pipeline; an exception from `build` is the
// program's error, named with the node (a restart gets a void pipeline
// that ends at once rather than a half-built one).
struct builder {
  caf::actor_system* sys;
  std::shared_ptr<const node_config> cfg;
  const run_config* opts;
  detail::process_state* process;
  std::uint32_t collectors;
  const build_function* build;

  // The pipeline and its iterations, or an error naming the node.
  caf::expected<std::pair<pipeline, std::int64_t>>
  operator()(std::int64_t restarts) const {
    node_setup setup{*sys, *cfg, *opts, *process, collectors, restarts};
    try {
      (*build)(setup);
    } catch (const std::exception& e) {
      return make_error(errc::invalid_config,
                        "cannot build node " + std::to_string(cfg->id) + ": "
                          + e.what());
    }
    auto steps = setup.max_steps();
    return std::make_pair(setup.take_pipeline(), steps);
  }
};

// A restart's pipeline (role_supervisor asks for one per restart).
std::function<pipeline()> rebuilder(builder b, std::int64_t first_restart) {
  auto count = std::make_shared<std::int64_t>(first_restart);
  return [b, count]() -> pipeline {
    auto made = b(++*count);
    if (!made) {
      log::error(b.cfg->id, render(made.error()));
      throw std::runtime_error(render(made.error()));
    }
    return std::move(made->first);
  };
}

void finish_run(detail::process_state& process, run_result& result,
                clock_type::time_point start) {
  result.seconds = std::chrono::duration<double>(clock_type::now() - start)
                     .count();
  for (auto& rep : result.reports)
    result.failed = result.failed || rep.failed;
  for (auto& fn : process.at_exit)
    fn(result);
}

int run_embedded(caf::actor_system& sys, const run_config& opts,
                 const node_config& base, const build_function& build) {
  detail::process_state process;
  auto learners = opts.learners > 0 ? static_cast<std::uint32_t>(opts.learners)
                                    : base.learners;
  auto collectors = static_cast<std::uint32_t>(
    std::max<std::int64_t>(opts.collectors, 0));
  auto workers = learners + (collectors > 0 ? collectors + 1 : 0);
  std::vector<local_node> nodes;
  for (std::uint32_t i = 0; i < workers; ++i) {
    auto cfg = std::make_shared<node_config>(base);
    cfg->id = i;
    cfg->index = i;
    cfg->workers = workers;
    cfg->learners = learners;
    cfg->roles = default_roles(i, workers, learners);
    cfg->distributed = false;
    builder b{&sys, cfg, &opts, &process, collectors, &build};
    auto made = b(0);
    if (!made) {
      log::error(i, render(made.error()));
      return 1;
    }
    local_node n;
    n.id = i;
    n.roles = cfg->roles;
    n.pipe = std::move(made->first);
    n.max_step = made->second;
    n.rebuild = rebuilder(b, 0);
    nodes.push_back(std::move(n));
  }
  local_run_options lro;
  lro.max_restarts = base.max_restarts;
  lro.role_nice = base.role_nice;
  lro.print_reports = process.print_reports;
  lro.deadline = process.deadline;
  lro.stop_on_signals = true;
  auto start = clock_type::now();
  auto reports = run_local(sys, std::move(nodes), lro);
  run_result result;
  if (!reports) {
    log::error(0, "run failed: " + render(reports.error()));
    result.failed = true;
  } else {
    result.reports = std::move(*reports);
  }
  finish_run(process, result, start);
  return result.failed ? 1 : 0;
}

int run_distributed(caf::actor_system& sys, const run_config& opts,
                    const node_config& base, const build_function& build) {
  detail::process_state process;
  auto cfg = std::make_shared<node_config>(base);
  cfg->accept_once_running = true;
  auto collectors = count_collectors(cfg->workers, cfg->learners);
  auto node = node::start(sys, *cfg);
  if (!node) {
    log::error(cfg->id, "cannot start: " + render(node.error()));
    return 1;
  }
  builder b{&sys, cfg, &opts, &process, collectors, &build};
  auto made = b(cfg->restart_count);
  if (!made) {
    log::error(cfg->id, render(made.error()));
    node->stop();
    return 1;
  }
  node_run_options nro;
  nro.max_step = made->second;
  nro.print_report = process.print_reports;
  nro.deadline = process.deadline;
  nro.stop_on_signals = true;
  nro.rebuild = rebuilder(b, cfg->restart_count);
  auto start = clock_type::now();
  auto rep = node->run(std::move(made->first), nro);
  node->stop();
  run_result result;
  result.distributed = true;
  if (!rep) {
    log::error(cfg->id, "run failed: " + render(rep.error()));
    result.failed = true;
  } else {
    if (rep->failed)
      log::error(cfg->id, "stopped: " + rep->stop_reason);
    result.reports.push_back(std::move(*rep));
  }
  finish_run(process, result, start);
  return result.failed ? 1 : 0;
}

} // namespace

int run_nodes(caf::actor_system& sys, const run_config& opts,
              const build_function& build) {
  // Watch SIGINT and SIGTERM from the start: one that comes while the nodes
  // connect stops the run as soon as it runs, instead of killing it.
  auto watching = on_stop_signal([](int) {});
  // Segments that killed dice processes of this user left in /dev/shm
  // (nothing removes them otherwise: they outlive their process).
  if (auto n = sweep_dead_segments())
    log::info(0,
              "removed " + std::to_string(n)
                + " shared-memory segment(s) that dead dice processes "
                  "left in /dev/shm");
  if (auto rc = opts.run_instead(sys))
    return *rc;
  auto cfg = make_node_config(opts);
  if (!cfg) {
    log::error(0, "bad node settings: " + render(cfg.error()));
    return 1;
  }
  if (cfg->distributed)
    return run_distributed(sys, opts, *cfg, build);
  return run_embedded(sys, opts, *cfg, build);
}

} // namespace dice
