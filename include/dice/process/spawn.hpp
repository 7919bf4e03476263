#pragma once

// Starting child processes: posix_spawn (no fork of a large, threaded
// parent; nothing runs between fork and exec) with O_CLOEXEC pipes, so a
// child inherits only its own stdout/stderr and no other child's pipe.
// Plain POSIX: dice-launch uses it without CAF or LibTorch.

#include "dice/process/unique_fd.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace dice::process {

/// Where a child's stdout and stderr go.
enum class capture {
  /// Both stay the parent's.
  none,
  /// Both go to one pipe (`child::out`).
  merged,
  /// stdout to `child::out`, stderr to `child::err`.
  separate,
};

/// What to start.
struct spawn_options {
  /// Program and arguments; argv[0] without a '/' is looked up in PATH.
  std::vector<std::string> argv;
  /// "NAME=value" entries added to (or replacing in) the parent's environment.
  std::vector<std::string> env;
  /// Where output goes.
  capture output = capture::merged;
  /// Signal the child gets when the thread that started it ends (0: none).
  /// posix_spawn cannot set it in the child, so it travels in the
  /// environment and takes effect where the child calls
  /// `die_with_parent_if_asked()` (DICE_MAIN programs, dice-launch and the
  /// test binaries do, first thing).
  int death_signal = 0;
  /// Starts the child as the leader of a new process group (setpgid(0, 0)
  /// before exec), so that `kill(-pid, sig)` reaches it and whatever it
  /// starts. The group exists when spawn returns: no race with a signal the
  /// parent sends right after.
  bool new_process_group = false;
  /// A descriptor the child gets as its fd 3 (-1: none), e.g. a listening
  /// socket dice-launch bound for the node (`--dice.listen-fd=3`).
  int pass_fd = -1;
};

/// A started child. The parent owns the read ends (O_CLOEXEC); move-only.
struct child {
  /// Process id; -1 if it could not be started.
  pid_t pid = -1;
  /// Read end of stdout (or of stdout+stderr); none without capture.
  unique_fd out;
  /// Read end of stderr with capture::separate; none otherwise.
  unique_fd err;
  /// errno of the failure when pid is -1 (ENOENT: no such program, ...).
  int error = 0;
};

/// Starts `opts.argv`. On failure nothing is left open and `error` says why.
child spawn(const spawn_options& opts);

/// Honours a death signal a spawning parent asked for (see
/// spawn_options::death_signal): sets it, and exits at once if that parent
/// is already gone. Removes the request from the environment, so this
/// process's own children do not inherit it. Call it first thing in main.
void die_with_parent_if_asked();

} // namespace dice::process
