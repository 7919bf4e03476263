#include "dice/process/spawn.hpp"

#include "process/pipe.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

namespace dice::process {

namespace {

/// The environment variable that carries "SIGNAL:PARENT_PID".
constexpr const char* death_env = "DICE_PARENT_DEATH_SIGNAL";

/// The parent's environment with `extra` added or replacing entries.
std::vector<std::string> child_env(const std::vector<std::string>& extra) {
  std::vector<std::string> result;
  auto name_of = [](const std::string& entry) {
    return entry.substr(0, entry.find('='));
  };
  auto overridden = [&](const std::string& entry) {
    auto name = name_of(entry);
    for (auto& e : extra)
      if (name_of(e) == name)
        return true;
    return false;
  };
  for (auto p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string entry{*p};
    if (!overridden(entry))
      result.push_back(std::move(entry));
  }
  result.insert(result.end(), extra.begin(), extra.end());
  return result;
}

std::vector<char*> pointers(std::vector<std::string>& xs) {
  std::vector<char*> result;
  for (auto& x : xs)
    result.push_back(x.data());
  result.push_back(nullptr);
  return result;
}

} // namespace

child spawn(const spawn_options& opts) {
  child result;
  if (opts.argv.empty()) {
    result.error = EINVAL;
    return result;
  }
  // Every pipe end still owned here closes on return: on failure all of
  // them, on success the write ends (the child has its copies).
  owned_pipe out;
  owned_pipe err;
  auto fail = [&](int code) {
    result = child{};
    result.error = code;
    return std::move(result);
  };
  if (opts.output != capture::none && !open_pipe(out))
    return fail(errno);
  if (opts.output == capture::separate && !open_pipe(err))
    return fail(errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears O_CLOEXEC on the copy: the child keeps fds 1 and 2 only.
  if (opts.output != capture::none) {
    posix_spawn_file_actions_adddup2(&actions, out.write.get(), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(
      &actions,
      opts.output == capture::merged ? out.write.get() : err.write.get(),
      STDERR_FILENO);
  }
  // The passed fd as the child's fd 3 (glibc's adddup2 clears O_CLOEXEC,
  // also when the fd is 3 already: Spawn.ThePassedFdIsTheChildsFdThree...).
  if (opts.pass_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, opts.pass_fd, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A fresh program expects default signal handling: the parent may block
  // signals or ignore SIGPIPE (dice-launch does), which exec would keep.
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (opts.new_process_group) {
    // Process group 0: the child's own pid.
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
  auto extra = opts.env;
  if (opts.death_signal != 0)
    extra.push_back(std::string{death_env} + "="
                    + std::to_string(opts.death_signal) + ":"
                    + std::to_string(::getpid()));
  auto env = child_env(extra);
  auto args = opts.argv;
  auto argp = pointers(args);
  auto envp = pointers(env);
  pid_t pid = -1;
  auto rc = ::posix_spawnp(&pid, argp[0], &actions, &attr, argp.data(),
                           envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return fail(rc);
  result.pid = pid;
  result.out = std::move(out.read);
  result.err = std::move(err.read);
  return result;
}

void die_with_parent_if_asked() {
  auto value = std::getenv(death_env);
  if (value == nullptr)
    return;
  std::string text{value};
  ::unsetenv(death_env);
  auto colon = text.find(':');
  if (colon == std::string::npos)
    return;
  auto sig = std::atoi(text.substr(0, colon).c_str());
  auto parent = static_cast<pid_t>(std::atol(text.c_str() + colon + 1));
  if (sig <= 0 || sig >= NSIG || parent <= 0)
    return;
  ::prctl(PR_SET_PDEATHSIG, sig);
  // The parent may have died before prctl: then nobody sends the signal.
  if (::getppid() != parent) {
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
}

} // namespace dice::process
