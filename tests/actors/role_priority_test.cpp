// A detached role actor lowers its own thread's priority (issue 25, item 4):
// its compute then yields to the router and CAF's I/O threads when both
// want a core, while the shared pool workers keep theirs.

#include "dice/actors/scheduling.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/node_config.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

namespace {

using namespace std::chrono_literals;
using namespace dice;

int nice_of_this_thread() {
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}

struct priority_config : caf::actor_system_config {
  priority_config() {
    set("logger.verbosity", caf::atom("quiet"));
    dice::add_message_types(*this);
  }
};

// What the role actor's thread, and a thread it starts, run at.
struct seen_nice {
  std::atomic<int> own{-100};
  std::atomic<int> child{-100};
};

// Records what its node's thread runs at, every iteration; once both
// nodes recorded, it finishes the run. Before, each node stopped after one
// iteration, and the first to finish could end the run before the other
// iterated (a node's record then stayed -100: about 1 in 3 runs of
// --gtest_repeat=300).
middleware record_nice(std::shared_ptr<seen_nice> s,
                       std::shared_ptr<seen_nice> other) {
  middleware m;
  m.name = "record";
  auto svc = std::make_shared<node_services*>(nullptr);
  m.attach = [svc](node_services& x) {
    *svc = &x;
  };
  m.before = [s, other, svc](context&) -> step {
    s->own = nice_of_this_thread();
    // As LibTorch's OpenMP pool would be started by the thread that trains.
    std::thread t{[s] {
      s->child = nice_of_this_thread();
    }};
    t.join();
    if (other->child != -100 && *svc)
      (*svc)->request_finish("both recorded");
    return proceed;
  };
  return m;
}

// Runs a detached and a pooled node with `nice` until both recorded.
std::pair<std::shared_ptr<seen_nice>, std::shared_ptr<seen_nice>>
run_two_nices(int nice) {
  priority_config cfg;
  caf::actor_system sys{cfg};
  auto detached = std::make_shared<seen_nice>();
  auto pooled = std::make_shared<seen_nice>();
  std::vector<local_node> nodes;
  {
    pipeline p;
    p.use(record_nice(detached, pooled));
    nodes.push_back(local_node{0, {role::learner}, std::move(p), 0});
  }
  {
    pipeline p;
    p.use(record_nice(pooled, detached));
    local_node n{1, {role::collector}, std::move(p), 0};
    n.detached = false;
    nodes.push_back(std::move(n));
  }
  local_run_options opts;
  opts.print_reports = false;
  opts.deadline = 30s;
  opts.role_nice = nice;
  auto reps = run_local(sys, std::move(nodes), opts);
  EXPECT_TRUE(reps) << render(reps.error());
  return {detached, pooled};
}

TEST(RolePriority, ADetachedRoleLowersItsThreadAndThePoolKeepsItsOwn) {
  // Pool workers are started by this thread and inherit its nice value.
  int base = nice_of_this_thread();
  auto [detached, pooled] = run_two_nices(4);
  EXPECT_EQ(detached->own, std::min(base + 4, 19));
  EXPECT_EQ(detached->child, std::min(base + 4, 19));
  EXPECT_EQ(pooled->own, base);
  EXPECT_EQ(pooled->child, base);
  // The calling thread is untouched.
  EXPECT_EQ(nice_of_this_thread(), base);
}

TEST(RolePriority, ZeroLeavesTheRoleThreadAsItIs) {
  int base = nice_of_this_thread();
  auto [detached, pooled] = run_two_nices(0);
  EXPECT_EQ(detached->own, base);
  EXPECT_EQ(pooled->own, base);
}

TEST(RolePriority, LowerThisThreadRefusesOutOfRangeValues) {
  int base = nice_of_this_thread();
  EXPECT_FALSE(lower_this_thread(-1));
  EXPECT_FALSE(lower_this_thread(40));
  EXPECT_EQ(nice_of_this_thread(), base);
  // On a thread of its own, so that this test's thread keeps its priority.
  int got = -100;
  std::thread t{[&] {
    auto n = lower_this_thread(39);
    got = n ? *n : -100;
  }};
  t.join();
  EXPECT_EQ(got, 19); // capped at the lowest priority
}

struct priority_program_config : node_system_config {};

TEST(RolePriority, RoleNiceIsAnOptionWithADefaultAndBounds) {
  {
    priority_program_config cfg;
    const char* argv[] = {"prog"};
    ASSERT_FALSE(cfg.parse(1, const_cast<char**>(argv)));
    auto n = make_node_config(cfg);
    ASSERT_TRUE(n) << render(n.error());
    EXPECT_EQ(n->role_nice, default_role_nice);
  }
  {
    priority_program_config cfg;
    const char* argv[] = {"prog", "--dice.role-nice=0"};
    ASSERT_FALSE(cfg.parse(2, const_cast<char**>(argv)));
    auto n = make_node_config(cfg);
    ASSERT_TRUE(n) << render(n.error());
    EXPECT_EQ(n->role_nice, 0);
  }
  for (const char* bad : {"--dice.role-nice=-1", "--dice.role-nice=20"}) {
    priority_program_config cfg;
    const char* argv[] = {"prog", bad};
    ASSERT_FALSE(cfg.parse(2, const_cast<char**>(argv)));
    auto n = make_node_config(cfg);
    ASSERT_FALSE(n) << bad;
    EXPECT_NE(render(n.error()).find("dice.role-nice"), std::string::npos);
  }
}

} // namespace
