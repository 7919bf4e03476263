// A stand-in node for dice-launch's supervision tests: a real process that
// takes dice-launch's --dice.* arguments and fails the way a test asks.
//
//   --fail-runs=K    exit 3 while DICE_RESTART_COUNT < K, then succeed
//                    (K < 0: fail every time)
//   --fail-node=I    only node I fails (default: every node)
//   --run            instead of exiting 0, wait until a signal ends it
//   --grandchild     first fork a child that only waits (it shares the
//                    node's process group and has no parent-death signal)
//   --ignore-term    ignore SIGTERM (the node and its grandchild)
//   --finish-then-fail  log the end of the run as dice's router does, then
//                    exit 3 (a node that crashes while stopping)
//
// It prints "flaky node ID pid P restart R" and, with --grandchild,
// "flaky node ID grandchild G" on stdout.

#include "dice/process/fork_server.hpp"
#include "dice/process/spawn.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  // Like a dice node: dies with its launcher (the grandchild does not).
  dice::process::die_with_parent_if_asked();
  // Under dice-launch --fork-server, like a DICE_MAIN program.
  dice::process::serve_forks_if_asked(argc, argv);
  long id = -1;
  long fail_runs = 0;
  long fail_node = -1;
  bool run = false;
  bool grandchild = false;
  bool ignore_term = false;
  bool finish_then_fail = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      auto n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (auto v = value("--dice.node-id="))
      id = std::atol(v);
    else if (auto v = value("--fail-runs="))
      fail_runs = std::atol(v);
    else if (auto v = value("--fail-node="))
      fail_node = std::atol(v);
    else if (arg == "--run")
      run = true;
    else if (arg == "--grandchild")
      grandchild = true;
    else if (arg == "--ignore-term")
      ignore_term = true;
    else if (arg == "--finish-then-fail")
      finish_then_fail = true;
  }
  long restart = 0;
  if (auto v = std::getenv("DICE_RESTART_COUNT"))
    restart = std::atol(v);
  if (ignore_term)
    std::signal(SIGTERM, SIG_IGN);
  std::printf("flaky node %ld pid %ld restart %ld\n", id,
              static_cast<long>(::getpid()), restart);
  std::fflush(stdout);
  if (grandchild) {
    auto pid = ::fork();
    if (pid == 0) {
      for (;;)
        ::pause();
    }
    std::printf("flaky node %ld grandchild %ld\n", id, static_cast<long>(pid));
    std::fflush(stdout);
  }
  if (finish_then_fail) {
    std::fprintf(stderr,
                 "00:00:00.000 info    [node %ld] run finished by node %ld: "
                 "max_step\n",
                 id, id);
    return 3;
  }
  if ((fail_node < 0 || fail_node == id)
      && (fail_runs < 0 || restart < fail_runs)) {
    std::fprintf(stderr, "flaky node %ld fails on purpose (run %ld)\n", id,
                 restart + 1);
    return 3;
  }
  if (run)
    for (;;)
      ::pause();
  std::printf("flaky node %ld succeeded\n", id);
  return 0;
}
