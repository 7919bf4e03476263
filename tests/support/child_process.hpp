#pragma once

// A child process for multi-process tests: its stdout and stderr (merged)
// are read line by line as they come; every wait has a deadline, nothing
// sleeps.

#include "dice/process/spawn.hpp"

#include "support/files.hpp"
#include "support/json.hpp"
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dice::test {

/// A test binary that a test starts again as a child (the flood nodes) dies
/// with that test: every binary that can start children honours the request.
inline const bool dies_with_parent = [] {
  dice::process::die_with_parent_if_asked();
  return true;
}();

/// A child process whose merged output the test reads.
///
/// A thread reads the output as it comes, whatever the test waits on: a
/// child blocked on a full pipe stops logging and, with it, every actor that
/// logs (a collector that cannot write its trace line cannot take a finish).
/// Waiting on one child while another's pipe filled up once lost a run's
/// last deltas under load (Reconnect.*: the learner gave up on two stalled
/// collectors at its drain timeout).
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
      eof_ = true;
      return;
    }
    pid_ = p.pid;
    reader_ = std::thread{[this, fd = std::move(p.out)]() mutable {
      read_all(std::move(fd));
    }};
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Kills a child that is still running.
  ~child_process() {
    if (pid_ > 0 && !code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    stop_ = true;
    if (reader_.joinable())
      reader_.join();
  }

  /// Waits until a line not matched before matches `pattern`; false at the
  /// deadline or at the end of the output.
  bool wait_for(const std::regex& pattern, std::chrono::milliseconds timeout,
                std::smatch* match = nullptr) {
    auto deadline = clock_type::now() + timeout;
    std::unique_lock<std::mutex> guard{mtx_};
    for (;;) {
      while (scanned_ < lines_.size()) {
        std::smatch m;
        auto& line = lines_[scanned_++];
        if (std::regex_search(line, m, pattern)) {
          if (match) {
            // The match refers into `line`, which a later append may move:
            // keep a copy alive with the match.
            matched_.push_back(std::make_unique<std::string>(line));
            std::regex_search(*matched_.back(), *match, pattern);
          }
          return true;
        }
      }
      if (eof_)
        return false;
      if (cv_.wait_until(guard, deadline) == std::cv_status::timeout
          && scanned_ == lines_.size())
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
      auto now = clock_type::now();
      if (now >= deadline)
        return std::nullopt;
      // No signal says "exited" here; the end of the output comes with the
      // exit, so wait for it, polling at most every 20 ms.
      std::unique_lock<std::mutex> guard{mtx_};
      cv_.wait_until(
        guard, std::min(deadline, now + std::chrono::milliseconds{20}), [this] {
          return eof_;
        });
    }
    // The rest of its output (a grandchild may hold the pipe: bounded).
    std::unique_lock<std::mutex> guard{mtx_};
    cv_.wait_for(guard, std::chrono::seconds{2}, [this] {
      return eof_;
    });
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

  /// Every line read so far (a copy: the reader keeps appending).
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return lines_;
  }

  /// All output so far, for failure messages.
  std::string text() const {
    std::lock_guard<std::mutex> guard{mtx_};
    std::string result;
    for (auto& l : lines_)
      result += l + "\n";
    return result;
  }

 private:
  // The reader thread: appends whole lines until the end of the output (or
  // the destructor), then closes the pipe.
  void read_all(dice::unique_fd fd) {
    std::string partial;
    char buf[8192];
    while (!stop_) {
      pollfd p{fd.get(), POLLIN, 0};
      // Polls in slices so that the destructor can stop it while a
      // grandchild still holds the pipe open.
      if (::poll(&p, 1, 100) <= 0)
        continue;
      auto n = ::read(fd.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      partial.append(buf, static_cast<std::size_t>(n));
      std::vector<std::string> got;
      std::size_t pos;
      while ((pos = partial.find('\n')) != std::string::npos) {
        got.push_back(partial.substr(0, pos));
        partial.erase(0, pos + 1);
      }
      if (got.empty())
        continue;
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& l : got)
        lines_.push_back(std::move(l));
      cv_.notify_all();
    }
    fd.reset();
    std::lock_guard<std::mutex> guard{mtx_};
    if (!partial.empty())
      lines_.push_back(std::move(partial));
    eof_ = true;
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  std::thread reader_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool eof_ = false;
  std::vector<std::string> lines_;
  std::vector<std::unique_ptr<std::string>> matched_;
  std::size_t scanned_ = 0;
  std::optional<int> code_;
};

/// Seconds from `t0` to now.
inline double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
    .count();
}

/// The pid of `launcher`'s child (dice-launch's node) started with
/// `--dice.node-id=ID` (-1 while it has none).
inline pid_t launched_node_pid(pid_t launcher, int id) {
  namespace fs = std::filesystem;
  auto want = "--dice.node-id=" + std::to_string(id) + " ";
  std::error_code ec;
  for (auto& e : fs::directory_iterator{"/proc", ec}) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto text = read_all(e.path() / "stat");
    auto close = text.rfind(')');
    if (close == std::string::npos || close + 2 > text.size())
      continue;
    std::istringstream rest{text.substr(close + 2)};
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launcher)
      continue;
    // Arguments end with NUL: each becomes a space, the last one too.
    auto cmd = read_all(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(want) != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

} // namespace dice::test
