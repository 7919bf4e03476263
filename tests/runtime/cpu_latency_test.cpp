// The CPU latency request (runtime/cpu_latency.hpp) against the real
// kernel: while it is held, the CPUs' idle time goes to cpuidle's polling
// state instead of a halt, and it stops when the request is dropped. The
// idle windows below are what is measured (how the CPUs idle), not a wait
// for something to happen.

#include "dice/core/errc.hpp"
#include "dice/runtime/cpu_latency.hpp"
#include "dice/runtime/node.hpp"
#include "dice/runtime/node_config.hpp"

#include "caf/actor_system.hpp"

#include "support/loopback_node.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using namespace dice;
namespace fs = std::filesystem;

// Microseconds all CPUs spent idle so far: in cpuidle's polling state, and
// in every state.
struct idle_time {
  std::uint64_t polling = 0;
  std::uint64_t all = 0;
};

idle_time read_idle_time() {
  idle_time r;
  std::error_code ec;
  for (auto& cpu : fs::directory_iterator{"/sys/devices/system/cpu", ec}) {
    auto dir = cpu.path() / "cpuidle";
    if (!fs::is_directory(dir, ec))
      continue;
    for (auto& state : fs::directory_iterator{dir, ec}) {
      std::string name;
      std::uint64_t us = 0;
      std::ifstream{state.path() / "name"} >> name;
      std::ifstream{state.path() / "time"} >> us;
      r.all += us;
      if (name == "POLL")
        r.polling += us;
    }
  }
  return r;
}

// The share of the CPUs' idle time spent polling over a window of idle
// ones (nothing to do for 50 ms), or -1 when they were hardly idle (a busy
// machine: no figure to judge).
double polling_share() {
  auto before = read_idle_time();
  ::poll(nullptr, 0, 50);
  auto after = read_idle_time();
  auto all = after.all - before.all;
  if (all < 5000)
    return -1;
  return static_cast<double>(after.polling - before.polling)
    / static_cast<double>(all);
}

// polling_share once the CPUs took the change: a CPU's time in an idle
// state is counted when it leaves it, so the first window after a change
// still counts idle time from before it (up to 57 % polling seen in the
// window just after a release); up to 20 windows on a busy machine.
double settled_polling_share() {
  polling_share();
  double share = -1;
  for (int i = 0; i < 20 && share < 0; ++i)
    share = polling_share();
  return share;
}

// The kernel's request in force now (the strictest of all held), or -1
// when it cannot be read.
std::int32_t effective_request() {
  unique_fd fd{::open(cpu_latency_device, O_RDONLY | O_CLOEXEC)};
  std::int32_t us = -1;
  if (fd.get() < 0 || ::read(fd.get(), &us, sizeof(us)) != sizeof(us))
    return -1;
  return us;
}

// Requests are the machine's: the tests that hold one take turns (ctest
// runs them as processes side by side), or one's "dropped" window would
// see another's request.
struct exclusive {
  exclusive()
    : fd(::open("/tmp/dice-cpu-latency-test.lock", O_RDWR | O_CREAT | O_CLOEXEC,
                0666)) {
    if (fd.get() >= 0)
      ::flock(fd.get(), LOCK_EX);
  }
  unique_fd fd; // the lock goes with it
};

bool can_request() {
  return ::access(cpu_latency_device, W_OK) == 0
    && fs::exists("/sys/devices/system/cpu/cpu0/cpuidle");
}

TEST(CpuLatency, WhileHeldIdleCpusPollInsteadOfHalting) {
  if (!can_request())
    GTEST_SKIP() << "no writable " << cpu_latency_device << " or cpuidle";
  exclusive turn;
  double held = -1;
  {
    auto req = cpu_latency_request::hold(0);
    ASSERT_TRUE(req) << render(req.error());
    EXPECT_EQ(req->microseconds(), 0);
    EXPECT_EQ(effective_request(), 0);
    held = settled_polling_share();
  }
  auto free = settled_polling_share();
  if (held < 0 || free < 0)
    GTEST_SKIP() << "the CPUs were never idle long enough to compare";
  if (effective_request() == 0)
    GTEST_SKIP() << "another process holds a request of 0 us";
  EXPECT_GT(held, 0.9) << "idle time spent polling while the request is held";
  EXPECT_LT(free, 0.5) << "idle time spent polling once it is dropped";
}

// --dice.cpu-latency-us as a node runs it: held from node::start, dropped
// at stop (the node and its actor system still alive). Judged by the
// request the kernel has in force, not by how the CPUs idle: that part is
// the test above, and under load (CI's sanitizer stage, tests side by
// side) the idle governor polls short idle periods on its own, so an idle
// share "after" proved nothing there.
TEST(CpuLatency, ANodeHoldsItFromStartUntilStop) {
  if (!can_request())
    GTEST_SKIP() << "no writable " << cpu_latency_device << " or cpuidle";
  exclusive turn;
  auto before = effective_request();
  if (before == 0)
    GTEST_SKIP() << "another process holds a request of 0 us";
  node_system_config cfg;
  caf::actor_system sys{cfg};
  auto nc = dice::test::loopback_node_config(0, {role::learner}, false);
  nc.cpu_latency_us = 0;
  auto n = node::start(sys, std::move(nc));
  ASSERT_TRUE(n) << render(n.error());
  EXPECT_EQ(effective_request(), 0) << "while the node runs";
  n->stop();
  EXPECT_EQ(effective_request(), before) << "once the node stopped";
}

TEST(CpuLatency, ABadBoundOrAnUnwritableDeviceIsAClearError) {
  auto neg = cpu_latency_request::hold(-1);
  ASSERT_FALSE(neg);
  EXPECT_NE(render(neg.error()).find("0 us or more"), std::string::npos);
  auto missing = cpu_latency_request::hold(0, "/nonexistent/cpu_dma_latency");
  ASSERT_FALSE(missing);
  auto why = render(missing.error());
  EXPECT_NE(why.find("/nonexistent/cpu_dma_latency"), std::string::npos) << why;
  EXPECT_NE(why.find("write access"), std::string::npos) << why;
}

struct latency_program_config : node_system_config {};

TEST(CpuLatency, ANodeTakesItAsAnOptionWithBounds) {
  {
    latency_program_config cfg;
    const char* argv[] = {"prog"};
    ASSERT_FALSE(cfg.parse(1, const_cast<char**>(argv)));
    auto n = make_node_config(cfg);
    ASSERT_TRUE(n) << render(n.error());
    EXPECT_EQ(n->cpu_latency_us, -1);
  }
  {
    latency_program_config cfg;
    const char* argv[] = {"prog", "--dice.cpu-latency-us=0"};
    ASSERT_FALSE(cfg.parse(2, const_cast<char**>(argv)));
    auto n = make_node_config(cfg);
    ASSERT_TRUE(n) << render(n.error());
    EXPECT_EQ(n->cpu_latency_us, 0);
  }
  for (const char* bad :
       {"--dice.cpu-latency-us=-2", "--dice.cpu-latency-us=2000000"}) {
    latency_program_config cfg;
    const char* argv[] = {"prog", bad};
    ASSERT_FALSE(cfg.parse(2, const_cast<char**>(argv)));
    auto n = make_node_config(cfg);
    ASSERT_FALSE(n) << bad;
    EXPECT_NE(render(n.error()).find("dice.cpu-latency-us"), std::string::npos);
  }
}

} // namespace
