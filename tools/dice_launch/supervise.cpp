// dice-launch's supervision: starting nodes, reaping them, restarts with
// backoff, signals forwarded to the nodes' process groups.
#include "launch.hpp"

namespace dice_launch {

namespace {

/// "exit code 3" or "signal 9 (Killed)".
std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status)) + " ("
      + ::strsignal(WTERMSIG(status)) + ")";
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

// Signals a node's whole process group (its own children too).
void signal_group(const child& c, int sig) {
  if (c.pid > 0 && ::kill(-c.pid, sig) != 0)
    ::kill(c.pid, sig); // not (yet) a group leader
}

} // namespace

void stop_all(std::vector<child>& children, run_state& run, const options& opts,
              int sig) {
  if (!run.stopping)
    run.kill_at = clock_type::now()
      + std::chrono::milliseconds{
        static_cast<long long>(opts.stop_timeout * 1000)};
  run.stopping = true;
  for (auto& c : children) {
    c.restart_at.reset();
    if (!c.exit_code)
      signal_group(c, sig);
  }
}

// Reaps exited nodes; with --max-restarts schedules their restarts.
void reap(std::vector<child>& children, run_state& run, const options& opts) {
  for (auto& c : children) {
    if (c.pid < 0 || c.exit_code)
      continue;
    int status = 0;
    auto r = ::waitpid(c.pid, &status, WNOHANG);
    if (r != c.pid)
      continue;
    if (WIFEXITED(status))
      c.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      c.exit_code = 128 + WTERMSIG(status);
    else
      continue;
    // Whatever the node left behind in its group goes with it.
    ::kill(-c.pid, SIGKILL);
    auto how = describe_status(status);
    std::cerr << "[dice-launch] node " << c.id << " exited with code "
              << *c.exit_code;
    if (WIFSIGNALED(status))
      std::cerr << " (" << how << ")";
    std::cerr << std::endl;
    if (*c.exit_code == 0) {
      if (!run.over)
        for (auto& other : children)
          if (other.restart_at) {
            other.restart_at.reset();
            std::cerr << "[dice-launch] node " << other.id
                      << " is not restarted: the run is over" << std::endl;
          }
      run.over = true;
      continue;
    }
    if (opts.max_restarts == 0 || run.over || run.stopping)
      continue;
    if (finish_seen) {
      std::cerr << "[dice-launch] node " << c.id
                << " is not restarted: the run finished" << std::endl;
      continue;
    }
    c.deaths.push_back(how);
    if (c.restarts >= opts.max_restarts) {
      c.given_up = true;
      std::cerr << "[dice-launch] node " << c.id << " failed "
                << c.deaths.size() << " times (last: " << how
                << "); giving up after " << c.restarts
                << " restart(s) (--max-restarts " << opts.max_restarts
                << "): stopping the run" << std::endl;
      stop_all(children, run, opts, SIGTERM);
      continue;
    }
    auto delay = std::min(
      30.0,
      opts.restart_backoff
        * static_cast<double>(1u << std::min(c.restarts, 16u)));
    c.restart_at = clock_type::now()
      + std::chrono::milliseconds{static_cast<long long>(delay * 1000)};
    std::cerr << "[dice-launch] node " << c.id << " died (" << how
              << "); restart " << (c.restarts + 1) << " of "
              << opts.max_restarts << " in " << delay << " s" << std::endl;
  }
}

bool spawn(child& c, const std::vector<std::string>& argv) {
  dice::process::spawn_options opts;
  opts.argv = argv;
  opts.output = dice::process::capture::separate;
  // A node must not outlive its launcher (e.g. killed by a test).
  opts.death_signal = SIGTERM;
  // Its own group: stopping the node reaches whatever it started.
  opts.new_process_group = true;
  opts.pass_fd = c.listen_fd.get();
  if (c.restarts > 0)
    opts.env.push_back("DICE_RESTART_COUNT=" + std::to_string(c.restarts));
  auto p = forks ? forks->fork(opts) : dice::process::spawn(opts);
  if (p.pid < 0) {
    errno = p.error;
    return false;
  }
  c.pid = p.pid;
  c.out_fd = std::move(p.out);
  c.err_fd = std::move(p.err);
  return true;
}

void forward_signals(std::vector<child>& children, run_state& run,
                     const options& opts, int& forwarded) {
  if (signals_seen != forwarded) {
    forwarded = signals_seen;
    // The first signal asks nicely; a second one kills.
    auto sig = forwarded > 1 ? SIGKILL : static_cast<int>(last_signal);
    stop_all(children, run, opts, sig);
  }
  if (run.kill_at && clock_type::now() >= *run.kill_at) {
    run.kill_at.reset();
    for (auto& c : children)
      if (!c.exit_code) {
        std::cerr << "[dice-launch] node " << c.id << " still runs "
                  << opts.stop_timeout << " s after the stop; killing it"
                  << std::endl;
        signal_group(c, SIGKILL);
      }
  }
}

// Starts the due restarts with the node's first command line, on the port
// it had (an ephemeral one included: its peers reconnect there).
void restart_due(std::vector<child>& children, const options& opts) {
  auto now = clock_type::now();
  for (auto& c : children) {
    if (c.restart_at && finish_seen) {
      c.restart_at.reset();
      std::cerr << "[dice-launch] node " << c.id
                << " is not restarted: the run finished" << std::endl;
    }
    if (!c.restart_at || now < *c.restart_at)
      continue;
    c.restart_at.reset();
    drain(c);
    auto args = c.argv;
    if (opts.ports.empty() && c.port != 0) {
      auto at = std::find_if(args.begin(), args.end(), [](auto& a) {
        return a.rfind("--dice.host=", 0) == 0;
      });
      args.insert(at == args.end() ? args.begin() + 1 : at + 1,
                  "--dice.port=" + std::to_string(c.port));
    }
    ++c.restarts;
    c.exit_code.reset();
    c.pid = -1;
    if (!spawn(c, args)) {
      std::cerr << "[dice-launch] cannot restart node " << c.id << " ("
                << args.front() << "): " << std::strerror(errno) << std::endl;
      c.exit_code = 1;
      c.given_up = true;
      continue;
    }
    std::cerr << "[dice-launch] restarted node " << c.id << " (restart "
              << c.restarts << " of " << opts.max_restarts << ", pid " << c.pid
              << ")" << std::endl;
  }
}

} // namespace dice_launch
