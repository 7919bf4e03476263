#pragma once

// A GoogleTest fixture around CAF's test coordinator: a single-threaded
// scheduler and a fake clock, so tests step messages and advance time
// without waiting. (CAF's own caf/test/dsl.hpp does not work under
// GoogleTest.)

#include "actors/role_state.hpp"
#include "dice/actors/router.hpp"
#include "dice/logging/log.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scheduler/test_coordinator.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dice::test {

/// Actor system config for deterministic tests.
struct test_config : caf::actor_system_config {
  test_config();
};

/// Collects dice's log lines while a test runs. Its sink may be called from
/// several threads at once (dice holds no lock around sinks).
class log_capture {
 public:
  log_capture();
  ~log_capture();

  /// Lines at warning level or above, as "level: text" (read it once the
  /// actors that log are done).
  std::vector<std::string> lines;

  /// Number of lines containing `needle`.
  std::size_t count(const std::string& needle) const;

 private:
  mutable std::mutex mtx_;
  log::sink prev_;
};

/// Fixture: one actor system on the test coordinator.
class deterministic : public ::testing::Test {
 protected:
  deterministic();
  ~deterministic() override;

  /// Runs every ready job; returns how many ran.
  std::size_t run();

  /// Advances the fake clock by `d`, firing due timeouts, and runs jobs.
  void advance(caf::timespan d);

  /// Spawns a router (stopped when the test ends).
  router_actor spawn_router();

  /// Spawns a role actor on `router` (stopped when the test ends).
  role_actor spawn_role(const router_actor& router, std::uint32_t node,
                        role_set roles, pipeline pipe,
                        std::int64_t max_step = 0);

  /// The state of a role actor (tests only read it).
  role_state& state_of(const role_actor& x);

  /// Sends start_atom to each actor and runs until nothing moves.
  void start(std::initializer_list<role_actor> xs);

  /// Publishes `(topic, x)` on `router` as if node `sender` had sent it.
  template <class T>
  void publish(const router_actor& b, const std::string& topic,
               std::uint32_t sender, T x) {
    sink->send(b, publish_atom::value, topic, sender,
               caf::make_message(topic, std::move(x)));
    sched.run();
  }

  /// Final reports of role actors that stopped, by node id.
  std::map<std::uint32_t, node_report> reports();

  test_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  log_capture logs;
  std::vector<caf::actor> spawned;
  caf::scoped_actor sink;
};

} // namespace dice::test
