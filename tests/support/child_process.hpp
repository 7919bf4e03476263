#pragma once

// A child process for multi-process tests: its stdout and stderr (merged)
// are read line by line; every wait has a deadline, nothing sleeps.

#include "dice/process/spawn.hpp"

#include "support/json.hpp"
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace dice::test {

/// A test binary that a test starts again as a child (the flood nodes) dies
/// with that test: every binary that can start children honours the request.
inline const bool dies_with_parent = [] {
  dice::process::die_with_parent_if_asked();
  return true;
}();

/// A child process whose merged output the test reads.
class child_process {
 public:
  using clock_type = std::chrono::steady_clock;

  /// Starts `argv` (argv[0]: a path, or a name looked up in PATH) with `env`
  /// ("NAME=value") added to the environment. The child dies with the test
  /// (SIGKILL, see die_with_parent_if_asked); one it cannot start reads as
  /// exit code 127 with the reason as its only line.
  explicit child_process(std::vector<std::string> argv,
                         std::vector<std::string> env = {}) {
    dice::process::spawn_options opts;
    opts.argv = std::move(argv);
    opts.env = std::move(env);
    opts.output = dice::process::capture::merged;
    opts.death_signal = SIGKILL;
    auto p = dice::process::spawn(opts);
    if (p.pid < 0) {
      lines_.push_back("cannot run " + opts.argv.front() + ": "
                       + std::strerror(p.error));
      code_ = 127;
      return;
    }
    pid_ = p.pid;
    fd_ = p.out;
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Kills a child that is still running.
  ~child_process() {
    if (pid_ > 0 && !code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0)
      ::close(fd_);
  }

  /// Reads output until `pattern` matches a line not matched before; false
  /// at the deadline or at the end of the output.
  bool wait_for(const std::regex& pattern, std::chrono::milliseconds timeout,
                std::smatch* match = nullptr) {
    auto deadline = clock_type::now() + timeout;
    for (;;) {
      while (scanned_ < lines_.size()) {
        std::smatch m;
        auto& line = lines_[scanned_++];
        if (std::regex_search(line, m, pattern)) {
          if (match)
            *match = m;
          return true;
        }
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      if (left.count() <= 0 || !read_some(left))
        return false;
    }
  }

  /// Waits for the exit code; nullopt at the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    while (!code_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                  : 128 + WTERMSIG(status);
        break;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      if (left.count() <= 0)
        return std::nullopt;
      // Reading keeps the pipe from filling up; at EOF the child is about
      // to be reaped, so poll it with a short wait.
      if (!read_some(std::min(left, std::chrono::milliseconds{50})))
        ::poll(nullptr, 0, 5);
    }
    while (read_some(std::chrono::milliseconds{0}))
      ; // collect the rest
    return code_;
  }

  /// Sends `sig`.
  void kill(int sig) {
    if (pid_ > 0 && !code_)
      ::kill(pid_, sig);
  }

  /// The process id.
  pid_t pid() const noexcept {
    return pid_;
  }

  /// Every line read so far.
  const std::vector<std::string>& lines() const noexcept {
    return lines_;
  }

  /// All output so far, for failure messages.
  std::string text() const {
    std::string result;
    for (auto& l : lines_)
      result += l + "\n";
    return result;
  }

 private:
  bool read_some(std::chrono::milliseconds timeout) {
    if (fd_ < 0)
      return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
      return false;
    char buf[8192];
    auto n = ::read(fd_, buf, sizeof(buf));
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    partial_.append(buf, static_cast<std::size_t>(n));
    std::size_t pos;
    while ((pos = partial_.find('\n')) != std::string::npos) {
      lines_.push_back(partial_.substr(0, pos));
      partial_.erase(0, pos + 1);
    }
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string partial_;
  std::vector<std::string> lines_;
  std::size_t scanned_ = 0;
  std::optional<int> code_;
};

} // namespace dice::test
