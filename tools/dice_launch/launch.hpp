// Internal to dice-launch: what its options (options.cpp), supervision
// (supervise.cpp), output relay (relay.cpp) and main (main.cpp) share.
#pragma once

#include "dice/process/fork_server.hpp"
#include "dice/process/spawn.hpp"
#include "dice/process/unique_fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace dice_launch {

using clock_type = std::chrono::steady_clock;

// Signals received so far (written by the handler).
extern volatile std::sig_atomic_t signals_seen;
// A node logged the end of the run ("run finished by node ..."): from then
// on a node that exits is not restarted, even if it fails while stopping.
extern bool finish_seen;
// The last signal received.
extern volatile std::sig_atomic_t last_signal;
// With --fork-server: the server every node is forked from (empty: spawn).
extern std::optional<dice::process::fork_client> forks;

/// One child process and its output pipes.
struct child {
  std::uint32_t id = 0;
  std::uint16_t port = 0;
  /// The node's listening socket, bound by the launcher and passed to every
  /// incarnation as its fd 3 (none: not bound).
  dice::unique_fd listen_fd;
  pid_t pid = -1;
  /// The current incarnation's stdout pipe (none once drained).
  dice::unique_fd out_fd;
  /// The current incarnation's stderr pipe (none once drained).
  dice::unique_fd err_fd;
  std::string out_buf;
  std::string err_buf;
  std::optional<int> exit_code;
  /// The command line of the first start, reused by every restart.
  std::vector<std::string> argv;
  /// Restarts so far.
  std::uint32_t restarts = 0;
  /// When a pending restart is due (empty: none pending).
  std::optional<clock_type::time_point> restart_at;
  /// How the incarnations before the current one ended, in order.
  std::vector<std::string> deaths;
  /// Exhausted its restarts: the run failed.
  bool given_up = false;
};

struct options {
  std::uint32_t workers = 1;
  /// Learner nodes (0: leave the program's default).
  std::uint32_t learners = 0;
  std::string topology = "mesh";
  std::vector<std::uint16_t> ports;
  std::vector<std::uint32_t> node_ids;
  std::string attach_to;
  /// Address every node listens on and is reached at.
  std::string host = "127.0.0.1";
  /// Restarts per node after a non-zero exit or a signal (0: none).
  std::uint32_t max_restarts = 0;
  /// Wait before a node's first restart; doubles per restart, at most 30 s.
  double restart_backoff = 1.0;
  /// After SIGINT/SIGTERM, kill what is still running after this long.
  double stop_timeout = 10;
  std::vector<std::string> command;
  /// Fork every node from one instance of the program that loaded its
  /// libraries once (dice::process::fork_client); DICE_MAIN programs only.
  bool fork_server = false;
  /// Trust settings every node gets (cluster secret, TLS files).
  std::vector<std::string> pass_through;
};

/// What the supervisor knows about the run as a whole.
struct run_state {
  /// A node exited 0: the run ended (finish); nothing is restarted.
  bool over = false;
  /// SIGINT/SIGTERM arrived, or a node exhausted its restarts: stopping.
  bool stopping = false;
  /// When still-running groups get SIGKILL (set once stopping).
  std::optional<clock_type::time_point> kill_at;
};

// -- options (options.cpp) ----------------------------------------------------

/// Prints `why` and the usage, exits 2.
[[noreturn]] void usage(const std::string& why);
/// The launcher's options (CLI11); exits through `usage` on bad ones, and
/// with 0 after printing the --help.
options parse(int argc, char** argv);

// -- ports (ports.cpp)
// ---------------------------------------------------------

/// A listening socket on host:port (0: any free port; `bound` gets the
/// port), O_CLOEXEC; none and `why` on failure.
dice::unique_fd listen_on(const std::string& host, std::uint16_t port,
                          std::uint16_t& bound, std::string& why);

// -- output relay (relay.cpp) -------------------------------------------------

/// Reads what is available from every child for at most `timeout_ms`.
void pump(std::vector<child>& children, int timeout_ms);
/// Reads what is left in a dead node's pipes (non-blocking) and closes them.
void drain(child& c);

// -- supervision (supervise.cpp) ----------------------------------------------

/// Stops the run: no more restarts, `sig` to every running node's group,
/// SIGKILL to what still runs after --stop-timeout.
void stop_all(std::vector<child>& children, run_state& run, const options& opts,
              int sig);
/// Reaps exited nodes; with --max-restarts schedules their restarts.
void reap(std::vector<child>& children, run_state& run, const options& opts);
/// Starts `c` with `argv` in its own process group; false (errno) on failure.
bool spawn(child& c, const std::vector<std::string>& argv);
/// Forwards SIGINT/SIGTERM to the nodes and kills them once the stop timed out.
void forward_signals(std::vector<child>& children, run_state& run,
                     const options& opts, int& forwarded);
/// Starts the due restarts.
void restart_due(std::vector<child>& children, const options& opts);

} // namespace dice_launch
