#pragma once

// A fork server for dice-launch --fork-server: the program is started once,
// loads its libraries (LibTorch: 0.35-0.5 s of CPU a process, see
// docs/distributed.md "Start-up") and then forks every node from that image
// instead of each node loading them again. The server forks twice, so a
// node's parent is the launcher (a child subreaper): the launcher waits for
// its nodes, signals their process groups and restarts them as it does
// spawned ones. Plain POSIX, like spawn.hpp.

#include "dice/process/spawn.hpp"
#include "dice/process/unique_fd.hpp"

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace dice::process {

/// The environment variable that makes a DICE_MAIN program a fork server
/// (its value: the server's socket, fd 3).
inline constexpr const char* fork_server_env = "DICE_FORK_SERVER";

/// In a program started as a fork server: serves fork requests until the
/// launcher is gone, then exits; returns only in a forked node, with `argc`
/// and `argv` the request's and stdout, stderr and fd 3 set up as `spawn`
/// would. Elsewhere returns at once. Call it first thing in main, while the
/// process has one thread (DICE_MAIN does).
void serve_forks_if_asked(int& argc, char**& argv);

/// The launcher's end of a fork server; move-only.
class fork_client {
 public:
  /// Starts `program` as a fork server (its own process group; it dies with
  /// the calling thread) and waits up to `timeout` until it is ready. Makes
  /// the calling process a child subreaper. Nothing (and nothing left
  /// running) if the program does not serve (not a DICE_MAIN program).
  static std::optional<fork_client> start(const std::string& program,
                                          std::chrono::milliseconds timeout);

  /// Forks a node from the server's image: `opts.argv`, `opts.env`,
  /// `opts.pass_fd` and `opts.death_signal` as `spawn` takes them; output
  /// always captured separately, always a new process group.
  child fork(const spawn_options& opts);

  /// Stops the server and waits for it (idempotent).
  void stop();

  /// The server's pid (-1 once stopped).
  pid_t pid() const noexcept {
    return pid_;
  }

 private:
  unique_fd fd_;
  pid_t pid_ = -1;
};

} // namespace dice::process
