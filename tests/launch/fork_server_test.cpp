// dice-launch --fork-server: the program is started once and every node is
// forked from it (dice::process::fork_client). Real processes: a cluster of
// dice_exchange_probe runs to its end, forked nodes are the launcher's children
// (restarted, signalled and stopped as spawned ones), nothing is left
// behind, and a program that is not a fork server falls back to spawning.
// Every wait has a deadline; nothing sleeps to pass.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using process = dice::test::child_process;

using dice::test::bin_dir;

std::vector<std::string> launch_forked(std::vector<std::string> launcher_args,
                                       std::vector<std::string> program) {
  std::vector<std::string> args{bin_dir + "dice-launch", "--fork-server"};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  args.push_back("--");
  args.insert(args.end(), program.begin(), program.end());
  return args;
}

/// The parent pid of `pid` (-1 if it is gone).
pid_t parent_of(pid_t pid) {
  std::ifstream f{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  if (!std::getline(f, stat))
    return -1;
  auto close = stat.rfind(')');
  if (close == std::string::npos)
    return -1;
  char state = 0;
  long ppid = -1;
  std::sscanf(stat.c_str() + close + 2, "%c %ld", &state, &ppid);
  return state == 'Z' ? -1 : static_cast<pid_t>(ppid);
}

/// Waits (bounded) until `pid` has ended; true if it did.
bool gone(pid_t pid, std::chrono::milliseconds timeout) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(timeout.count()));
    ::close(fd);
  }
  return parent_of(pid) < 0;
}

/// Whether any line `p` printed so far matches `re` (wait_for moves a
/// cursor past what it matched; this looks at every line).
bool has_line(const process& p, const std::string& re) {
  std::regex r{re};
  for (auto& l : p.lines())
    if (std::regex_search(l, r))
      return true;
  return false;
}

/// The fork server's pid from the launcher's line about it.
pid_t server_pid(process& p) {
  std::smatch m;
  if (!p.wait_for(std::regex{"nodes are forked from one instance of .* "
                             "\\(fork server pid ([0-9]+)\\)"},
                  30s, &m))
    return -1;
  return static_cast<pid_t>(std::stol(m[1]));
}

TEST(ForkServer, AClusterForkedFromOneImageRunsToItsEnd) {
  process p{
    launch_forked({"--workers", "4"},
                  {bin_dir + "dice_exchange_probe", "--steps=200", "--trace"})};
  auto server = server_pid(p);
  ASSERT_GT(server, 0) << p.text();
  auto rc = p.wait_exit(60s);
  ASSERT_TRUE(rc) << p.text();
  EXPECT_EQ(*rc, 0) << p.text();
  // Every node iterated and reported.
  for (auto re : {"\\[node 0\\] .*train iteration 0 ",
                  "\\[node 1\\] .*evaluate iteration 0",
                  "\\[node 2\\] .*collect iteration 0 ",
                  "\\[node 3\\] .*collect iteration 0 "})
    EXPECT_TRUE(has_line(p, re)) << re << "\n" << p.text();
  std::size_t reports = 0;
  for (auto& l : p.lines())
    if (l.find("\"stop_reason\"") != std::string::npos)
      ++reports;
  EXPECT_EQ(reports, 4u) << p.text();
  EXPECT_TRUE(gone(server, 5s)) << "the fork server outlived the launcher";
}

TEST(ForkServer, AForkedNodeIsTheLaunchersChildAndIsRestartedAndStopped) {
  process p{
    launch_forked({"--workers", "1", "--topology", "alone", "--max-restarts",
                   "1", "--restart-backoff", "0.01"},
                  {bin_dir + "dice_flaky_node", "--run", "--grandchild"})};
  auto server = server_pid(p);
  ASSERT_GT(server, 0) << p.text();
  std::smatch m;
  ASSERT_TRUE(
    p.wait_for(std::regex{"flaky node 0 pid ([0-9]+) restart 0"}, 10s, &m))
    << p.text();
  auto first = static_cast<pid_t>(std::stol(m[1]));
  // Forked twice: its parent is the launcher (a child subreaper), which
  // waits for it, not the fork server.
  EXPECT_EQ(parent_of(first), p.pid()) << p.text();
  ::kill(first, SIGKILL);
  ASSERT_TRUE(
    p.wait_for(std::regex{"flaky node 0 pid ([0-9]+) restart 1"}, 10s, &m))
    << p.text();
  auto second = static_cast<pid_t>(std::stol(m[1]));
  EXPECT_EQ(parent_of(second), p.pid()) << p.text();
  EXPECT_TRUE(
    has_line(p, "node 0 died \\(signal 9 \\(Killed\\)\\); restart 1 of 1"))
    << p.text();
  // The second incarnation announces its grandchild after its pid line.
  ASSERT_TRUE(p.wait_for(std::regex{"flaky node 0 grandchild [0-9]+"}, 10s))
    << p.text();
  p.kill(SIGTERM);
  auto rc = p.wait_exit(10s);
  ASSERT_TRUE(rc) << p.text();
  // The node, the fork server and what the node started are gone.
  EXPECT_TRUE(gone(second, 5s));
  EXPECT_TRUE(gone(server, 5s)) << "the fork server outlived the launcher";
  std::vector<pid_t> grandchildren;
  std::smatch g;
  for (auto& l : p.lines())
    if (std::regex_search(l, g, std::regex{"flaky node 0 grandchild ([0-9]+)"}))
      grandchildren.push_back(static_cast<pid_t>(std::stol(g[1])));
  for (auto pid : grandchildren) {
    EXPECT_TRUE(gone(pid, 5s)) << "grandchild " << pid << " survived";
    ::kill(pid, SIGKILL);
  }
}

TEST(ForkServer, AProgramThatDoesNotServeIsSpawnedAsBefore) {
  // /bin/echo prints a line and exits instead of serving: the launcher
  // says so and starts the node on its own.
  process p{launch_forked({"--workers", "1", "--topology", "alone"},
                          {"/bin/echo", "plain-node"})};
  auto rc = p.wait_exit(30s);
  ASSERT_TRUE(rc) << p.text();
  EXPECT_EQ(*rc, 0) << p.text();
  EXPECT_TRUE(has_line(p, "did not start as a fork server")) << p.text();
  EXPECT_TRUE(has_line(p, "\\[node 0\\] .*plain-node$")) << p.text();
}

} // namespace
