#pragma once

// dice::run(argc, argv, build): the one entry of a dice program. `build`
// says which middleware a node runs; it is called once per node (and again
// for a node that restarts). Whether the nodes run as actors of this
// process (the embedded default: --collectors, --learners) or this process
// is one node of a cluster (dice-launch, srun, --dice.node-id by hand) is
// decided by the options alone, so no program wires anything twice.
//
//   int main(int argc, char** argv) {
//     return dice::run(argc, argv, [](dice::node_setup& n) {
//       n.use(dice::context_exchanger());
//       if (n.role() == dice::role::learner) n.use(train());
//       else n.use(collect());
//     });
//   }

#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/main.hpp"
#include "dice/runtime/node_config.hpp"

#include "caf/actor_system.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

namespace dice {

/// The options of a dice::run program: the node settings (`--dice.*`) and
/// the shape of a one-process run. Programs with options of their own
/// derive from it (CAF's opt_group on `custom_options_`).
class run_config : public node_system_config {
 public:
  run_config();

  /// --collectors: collector nodes of a one-process run.
  std::int64_t collectors = 3;
  /// --learners: learner nodes of a one-process run, one data-parallel
  /// group when more than 1 (0: take --dice.learners).
  std::int64_t learners = 0;

  /// Runs instead of the nodes when it returns an exit code (e.g. a
  /// program's --eval-only); the default runs the nodes.
  virtual std::optional<int> run_instead(caf::actor_system& sys) const;
};

/// What the process's nodes did, for `node_setup::at_exit`.
struct run_result {
  /// The final report of every node of this process, in node order.
  std::vector<node_report> reports;
  /// This process is one node of a cluster.
  bool distributed = false;
  /// Wall time from the first node's start to the last one's stop.
  double seconds = 0;
  /// Any node failed or the run could not start.
  bool failed = false;
};

/// The role a node with `roles` runs: the first of learner, evaluator,
/// collector, fetcher (one pipeline per node).
role main_role(const role_set& roles) noexcept;

namespace detail {

/// What the nodes of one process share (node_setup::shared, at_exit).
struct process_state {
  std::mutex mtx;
  std::map<std::type_index, std::shared_ptr<void>> shared;
  std::vector<std::function<void(const run_result&)>> at_exit;
  bool print_reports = true;
  caf::timespan deadline = std::chrono::minutes{30};
};

} // namespace detail

/// What `build` gets: who the node is, where it runs, and the pipeline it
/// fills. One per node and incarnation.
class node_setup {
 public:
  /// A setup for node `cfg` of a cluster of `collectors` collectors.
  node_setup(caf::actor_system& sys, const node_config& cfg,
             const run_config& options, detail::process_state& process,
             std::uint32_t collectors, std::int64_t restarts);

  /// Node id.
  std::uint32_t id() const noexcept {
    return cfg_->id;
  }

  /// Roles of the node.
  role_set roles() const noexcept {
    return cfg_->roles;
  }

  /// The role its pipeline serves (main_role).
  dice::role role() const noexcept {
    return main_role(cfg_->roles);
  }

  /// Position in the cluster (0..workers-1).
  std::uint32_t index() const noexcept {
    return cfg_->index;
  }

  /// Nodes in the cluster.
  std::uint32_t workers() const noexcept {
    return cfg_->workers;
  }

  /// Learner nodes in the cluster (more than 1: one data-parallel group).
  std::uint32_t learners() const noexcept {
    return cfg_->learners;
  }

  /// Collector nodes in the cluster.
  std::uint32_t collectors() const noexcept {
    return collectors_;
  }

  /// True if some node of the cluster has the role `r` (by default roles).
  bool cluster_has(dice::role r) const;

  /// This process is one node of a cluster (false: the embedded run).
  bool distributed() const noexcept {
    return cfg_->distributed;
  }

  /// Restarts of this node so far: of its process (dice-launch
  /// --max-restarts) plus of its role actor (--dice.max-restarts).
  std::int64_t restarts() const noexcept {
    return restarts_;
  }

  /// The node settings.
  const node_config& config() const noexcept {
    return *cfg_;
  }

  /// The program's options.
  const run_config& options() const noexcept {
    return *options_;
  }

  /// The actor system the node runs in.
  caf::actor_system& system() const noexcept {
    return *sys_;
  }

  /// Appends a stage to the node's pipeline.
  node_setup& use(middleware m) {
    pipe_.use(std::move(m));
    return *this;
  }

  /// Iterations of this node (0, the default: until the cluster finishes).
  void max_step(std::int64_t n) noexcept {
    max_step_ = n;
  }

  /// Whether the node prints its final report as a JSON line (default
  /// true); for the whole process.
  void print_report(bool on);

  /// Gives up after `d` (default 30 minutes); for the whole process.
  void deadline(caf::timespan d);

  /// The one T of this process, made by `make()` on first use (every node of
  /// an embedded run gets the same object; a restarted node too).
  template <class T, class F>
  std::shared_ptr<T> shared(F make) {
    std::lock_guard<std::mutex> guard{process_->mtx};
    auto& slot = process_->shared[std::type_index(typeid(T))];
    if (!slot)
      slot = std::shared_ptr<T>(make());
    return std::static_pointer_cast<T>(slot);
  }

  /// Runs `fn` once in this process after every node stopped (in the
  /// order registered).
  void at_exit(std::function<void(const run_result&)> fn);

  /// The pipeline built so far (run takes it).
  pipeline take_pipeline() {
    return std::move(pipe_);
  }

  /// The iterations set by max_step.
  std::int64_t max_steps() const noexcept {
    return max_step_;
  }

 private:
  caf::actor_system* sys_;
  const node_config* cfg_;
  const run_config* options_;
  detail::process_state* process_;
  std::uint32_t collectors_;
  std::int64_t restarts_;
  pipeline pipe_;
  std::int64_t max_step_ = 0;
};

/// Builds one node's pipeline.
using build_function = std::function<void(node_setup&)>;

/// Runs the nodes `opts` and `cfg` describe with `build`; returns the exit
/// code (0 when every node ended without an error).
int run_nodes(caf::actor_system& sys, const run_config& opts,
              const build_function& build);

/// Parses the options into a `Config` (a run_config), starts the actor
/// system and runs the nodes; `build(node_setup&)` or `build(node_setup&,
/// const Config&)` fills each node's pipeline. Returns the exit code.
template <class Config = run_config, class Build>
int run(int argc, char** argv, Build build) {
  static_assert(std::is_base_of<run_config, Config>::value,
                "dice::run: the config must derive from dice::run_config");
  return exec_main<Config>(
    [&build](caf::actor_system& sys, const Config& cfg) {
      return run_nodes(sys, cfg, [&](node_setup& n) {
        if constexpr (std::is_invocable<Build&, node_setup&,
                                        const Config&>::value)
          build(n, cfg);
        else
          build(n);
      });
    },
    argc, argv);
}

} // namespace dice
