#pragma once

#include "dice/actors/router.hpp"
#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/cpu_latency.hpp"
#include "dice/runtime/node_config.hpp"
#include "dice/security/auth.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dice::net {
class listener;
class data_plane;
} // namespace dice::net

namespace dice {

/// Options of `node::run`.
struct node_run_options {
  /// Iterations; 0 runs until the cluster finishes.
  std::int64_t max_step = 0;
  /// Print the final report as one JSON line on stdout.
  bool print_report = true;
  /// Give up after this long.
  caf::timespan deadline = std::chrono::minutes{30};
  /// Restarts of the role actor after a middleware threw (-1: the node's
  /// `max_restarts`, i.e. --dice.max-restarts).
  std::int64_t max_restarts = -1;
  /// Builds the pipeline of a restarted role actor; empty: the pipeline
  /// given to `run` is reused with the state its middleware kept.
  std::function<pipeline()> rebuild;
  /// Run the role actor on its own thread (see role_config::detached).
  bool detached_role = true;
  /// SIGINT or SIGTERM finishes the run as this node's own finish
  /// (reason "SIGTERM", not failed; stop_signals.hpp); dice::run sets it.
  bool stop_on_signals = false;
};

/// One node of a cluster: its router, published through the middleman and
/// attached to its peers; runs one role actor.
class node {
 public:
  /// Spawns the router and listens for peers (reports the port on stdout as
  /// "dice-node ID listening on port P"): dice accepts each connection
  /// itself, runs its preamble (net/preamble.hpp) and only then hands the
  /// socket to CAF's middleman. Refuses to listen beyond loopback with
  /// neither secret nor TLS unless `insecure`. The node (and its copies)
  /// owns the listener: it accepts peers until `stop` or until the last
  /// copy is gone.
  static caf::expected<node> start(caf::actor_system& sys, node_config cfg);

  /// Node id.
  std::uint32_t id() const noexcept {
    return cfg_.id;
  }

  /// Roles of this node.
  role_set roles() const noexcept {
    return cfg_.roles;
  }

  /// The port the router listens on (0: not listening).
  std::uint16_t port() const noexcept {
    return port_;
  }

  /// The node's router.
  const router_actor& router() const noexcept {
    return router_;
  }

  /// The settings.
  const node_config& config() const noexcept {
    return cfg_;
  }

  /// The data plane (null when off: `data_channel` false, or not
  /// distributed).
  const std::shared_ptr<net::data_plane>& data_plane() const noexcept {
    return data_;
  }

  /// Runs `pipe` as this node's role actor until the cluster finishes;
  /// returns its report.
  caf::expected<node_report> run(pipeline pipe, node_run_options opts = {});

  /// Stops listening and stops the router.
  void stop();

 private:
  node(caf::actor_system& sys, node_config cfg)
    : sys_(&sys), cfg_(std::move(cfg)) {}

  // Opens the listener and starts handing authenticated connections to
  // the gate in front of the router.
  caf::error listen();

  caf::actor_system* sys_;
  node_config cfg_;
  router_actor router_;
  std::uint16_t port_ = 0;
  std::shared_ptr<net::listener> listener_;
  std::shared_ptr<net::data_plane> data_;
  // Held from start until stop (or the last copy); null: none asked for,
  // or the system refused it.
  std::shared_ptr<cpu_latency_request> latency_;
};

} // namespace dice
