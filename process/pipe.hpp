#pragma once

// A pipe whose two ends are owned (spawn.cpp, fork_server.cpp).

#include "dice/process/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace dice::process {

/// Both ends of a pipe, owned.
struct owned_pipe {
  /// The read end.
  unique_fd read;
  /// The write end.
  unique_fd write;
};

/// Opens `p` as a new O_CLOEXEC pipe; false (errno set) on failure.
inline bool open_pipe(owned_pipe& p) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return false;
  p.read.reset(fds[0]);
  p.write.reset(fds[1]);
  return true;
}

} // namespace dice::process
