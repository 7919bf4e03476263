// dice::process::spawn: posix_spawn with O_CLOEXEC pipes. A child holds only
// its own stdout/stderr, gets the environment it was given, dies with
// the process that started it; a new process group is in place at once.

#include "dice/process/spawn.hpp"

#include "support/child_process.hpp"
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <set>
#include <string>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;

/// This process's open file descriptors.
std::set<int> open_fds() {
  std::set<int> result;
  auto dir = ::opendir("/proc/self/fd");
  if (dir == nullptr)
    return result;
  auto own = ::dirfd(dir);
  while (auto e = ::readdir(dir)) {
    if (e->d_name[0] == '.')
      continue;
    auto fd = std::atoi(e->d_name);
    if (fd != own)
      result.insert(fd);
  }
  ::closedir(dir);
  return result;
}

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

/// Runs this binary again as one of the disabled "roles" below.
std::vector<std::string> role(const std::string& name) {
  return {self_exe(), "--gtest_also_run_disabled_tests",
          "--gtest_filter=SpawnRole.DISABLED_" + name};
}

} // namespace

// -- roles this binary plays as a child ---------------------------------------

// Waits (a minute at most) to be killed.
TEST(SpawnRole, DISABLED_Sleeper) {
  std::printf("sleeper %d ready\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  ::poll(nullptr, 0, 60'000);
}

// Starts a sleeper that must die with it, reports its pid, then waits.
TEST(SpawnRole, DISABLED_Middle) {
  dice::process::spawn_options opts;
  opts.argv = role("Sleeper");
  opts.output = dice::process::capture::none;
  opts.death_signal = SIGKILL;
  auto c = dice::process::spawn(opts);
  ASSERT_GT(c.pid, 0);
  std::printf("grandchild %d\n", static_cast<int>(c.pid));
  std::fflush(stdout);
  ::poll(nullptr, 0, 60'000);
}

// -- tests --------------------------------------------------------------------

TEST(Spawn, AChildHoldsNoOtherChildsPipe) {
  // Before (fork + pipe() in child_process): the second child inherited the
  // read end of the first child's pipe.
  auto before = open_fds();
  // A child that lives until the test ends ("read x" on an empty stdin
  // exited at once, and its pipe could be closed before it was looked at).
  child_process first{role("Sleeper")};
  ASSERT_TRUE(first.wait_for(std::regex{"sleeper [0-9]+ ready"}, 20s))
    << first.text();
  std::set<int> first_fds;
  for (auto fd : open_fds())
    if (before.count(fd) == 0)
      first_fds.insert(fd);
  ASSERT_FALSE(first_fds.empty());
  child_process second{{"/bin/sh", "-c", "ls /proc/$$/fd"}};
  ASSERT_EQ(second.wait_exit(20s), 0) << second.text();
  std::set<int> seen;
  for (auto& line : second.lines())
    seen.insert(std::atoi(line.c_str()));
  EXPECT_TRUE(seen.count(1) && seen.count(2)) << second.text();
  for (auto fd : first_fds)
    EXPECT_EQ(seen.count(fd), 0u)
      << "fd " << fd << " of the first child leaked:\n"
      << second.text();
}

TEST(Spawn, SeparateStdoutAndStderrAndTheGivenEnvironment) {
  dice::process::spawn_options opts;
  opts.argv = {"sh", "-c", "echo out $DICE_SPAWN_X $HOME; echo err >&2"};
  opts.env = {"DICE_SPAWN_X=42", "HOME=/nowhere"};
  opts.output = dice::process::capture::separate;
  auto c = dice::process::spawn(opts);
  ASSERT_GT(c.pid, 0) << std::strerror(c.error);
  auto read_all = [](dice::unique_fd fd) {
    std::string text;
    char buf[256];
    ssize_t n;
    while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0)
      text.append(buf, static_cast<std::size_t>(n));
    return text;
  };
  EXPECT_EQ(read_all(std::move(c.out)), "out 42 /nowhere\n");
  EXPECT_EQ(read_all(std::move(c.err)), "err\n");
  int status = 0;
  ASSERT_EQ(::waitpid(c.pid, &status, 0), c.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Spawn, ThePassedFdIsTheChildsFdThreeWhateverItsNumberHere) {
  // dice-launch passes each node its listening socket this way. One run
  // with the fd at a high number, one with it at 3 itself (a dup2 onto
  // itself keeps O_CLOEXEC; glibc's posix_spawn clears it, checked here).
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  // Both ends well above 3 (the pipe may have got 3 itself).
  for (auto& end : p) {
    auto high = ::fcntl(end, F_DUPFD_CLOEXEC, 100);
    ASSERT_GE(high, 100);
    ::close(end);
    end = high;
  }
  int saved3 = ::fcntl(3, F_DUPFD_CLOEXEC, 100); // -1 if 3 was free
  for (bool at_three : {false, true}) {
    int fd = p[1];
    if (at_three) {
      ASSERT_EQ(::dup3(p[1], 3, O_CLOEXEC), 3);
      fd = 3;
    }
    dice::process::spawn_options opts;
    opts.argv = {"sh", "-c", "echo through-3 >&3"};
    opts.output = dice::process::capture::none;
    opts.pass_fd = fd;
    auto c = dice::process::spawn(opts);
    ASSERT_GT(c.pid, 0) << std::strerror(c.error);
    int status = 0;
    ASSERT_EQ(::waitpid(c.pid, &status, 0), c.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << at_three;
    char buf[64] = {};
    auto n = ::read(p[0], buf, sizeof(buf) - 1);
    EXPECT_EQ(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0),
              "through-3\n")
      << "fd at " << fd;
  }
  // Put back whatever was at 3.
  if (saved3 >= 0) {
    ::dup3(saved3, 3, O_CLOEXEC);
    ::close(saved3);
  } else {
    ::close(3);
  }
  ::close(p[0]);
  ::close(p[1]);
}

TEST(Spawn, AMissingProgramIsAnErrorAndLeavesNothingOpen) {
  auto before = open_fds();
  dice::process::spawn_options opts;
  opts.argv = {"/nonexistent/dice-program"};
  auto c = dice::process::spawn(opts);
  EXPECT_EQ(c.pid, -1);
  EXPECT_EQ(c.error, ENOENT);
  EXPECT_EQ(open_fds(), before);
  child_process p{{"/nonexistent/dice-program"}};
  EXPECT_EQ(p.wait_exit(1s), 127);
  EXPECT_NE(p.text().find("cannot run /nonexistent/dice-program"),
            std::string::npos);
}

TEST(Spawn, AGrandchildDiesWithTheChildThatStartedIt) {
  // Orphans come to this process, so it can reap and inspect the sleeper.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  child_process middle{role("Middle")};
  std::smatch m;
  ASSERT_TRUE(middle.wait_for(std::regex{"grandchild ([0-9]+)"}, 30s, &m))
    << middle.text();
  auto grandchild = static_cast<pid_t>(std::stol(m[1]));
  middle.kill(SIGKILL);
  ASSERT_EQ(middle.wait_exit(10s), 128 + SIGKILL);
  // The sleeper is ours now; it must end by the death signal, not by its
  // one-minute poll.
  auto pidfd = static_cast<int>(::syscall(SYS_pidfd_open, grandchild, 0));
  ASSERT_GE(pidfd, 0) << std::strerror(errno);
  pollfd p{pidfd, POLLIN, 0};
  auto exited = ::poll(&p, 1, 20'000) == 1;
  ::close(pidfd);
  ASSERT_TRUE(exited) << "the grandchild outlived its parent by 20 s";
  int status = 0;
  ASSERT_EQ(::waitpid(grandchild, &status, 0), grandchild);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(Spawn, ANewProcessGroupExistsWhenSpawnReturns) {
  // dice-launch signals a node's whole group (kill(-pid)) right after
  // starting it, when it has to stop the run.
  dice::process::spawn_options opts;
  opts.argv = role("Sleeper");
  opts.output = dice::process::capture::none;
  opts.death_signal = SIGKILL;
  auto plain = dice::process::spawn(opts);
  ASSERT_GT(plain.pid, 0) << std::strerror(plain.error);
  EXPECT_EQ(::getpgid(plain.pid), ::getpgrp());
  opts.new_process_group = true;
  auto leader = dice::process::spawn(opts);
  ASSERT_GT(leader.pid, 0) << std::strerror(leader.error);
  EXPECT_EQ(::getpgid(leader.pid), leader.pid);
  EXPECT_EQ(::kill(-leader.pid, SIGKILL), 0) << std::strerror(errno);
  ::kill(plain.pid, SIGKILL);
  for (auto pid : {plain.pid, leader.pid}) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
}
