#pragma once

// A GoogleTest fixture around CAF's test coordinator: a single-threaded
// scheduler and a fake clock, so tests step messages and advance time
// without waiting. (CAF's own caf/test/dsl.hpp does not work under
// GoogleTest.)

#include <string>
#include <vector>

#include "dice/actors/bus.hpp"
#include "dice/actors/role_actor.hpp"
#include "dice/log.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scheduler/test_coordinator.hpp"

#include <gtest/gtest.h>

namespace dice::test {

/// Actor system config for deterministic tests.
struct test_config : caf::actor_system_config {
  test_config();
};

/// Collects dice's log lines while a test runs.
class log_capture {
public:
  log_capture();
  ~log_capture();

  /// Lines at warning level or above, as "level: text".
  std::vector<std::string> lines;

  /// Number of lines containing `needle`.
  std::size_t count(const std::string& needle) const;

private:
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

  /// Spawns a bus (stopped when the test ends).
  bus_actor spawn_bus();

  /// Spawns a role actor on `bus` (stopped when the test ends).
  role_actor spawn_role(const bus_actor& bus, std::uint32_t node, role_set roles,
                        pipeline pipe, std::int64_t max_step = 0);

  /// The state of a role actor (tests only read it).
  role_state& state_of(const role_actor& x);

  test_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  log_capture logs;
  std::vector<caf::actor> spawned;
};

} // namespace dice::test
