// dice-launch: starts N local processes of a dice program as the nodes of one
// cluster (the `ditask --parallel-workers N` of dice).
//
//   dice-launch --workers N [--learners L] [--topology star|mesh|alone]
//               [--ports P] [--node-ids I[,I...]] [--attach-to host:port,...]
//               [--host ADDR] [--startup-timeout S]
//               [--max-restarts N] [--restart-backoff S] [--stop-timeout S]
//               [--dice.secret-file=F] [--openssl.KEY=V ...] -- PROGRAM ...
//
// Each node gets `--dice.node-id= --dice.workers= --dice.topology=
// --dice.host= --dice.port= --dice.attach-to=` on its command line (and
// `--dice.learners=L` with --learners: nodes 0..L-1 are learners forming one
// data-parallel group, docs/learner_group.md). Nodes
// listen on --host (default 127.0.0.1: loopback only). Without --ports
// every node listens on an ephemeral port, which the launcher reads from
// the node's "dice-node ID listening on port P" line before starting the
// nodes that attach to it. --dice.secret-file and --openssl.* options go to
// every node unchanged (one cluster shares its secret and CA); with
// neither, the launcher writes a fresh random secret to a private
// temporary file for its nodes and removes it at exit. Output lines are
// prefixed with "[node ID] "; SIGINT/SIGTERM are forwarded; the exit code
// is 0 only if every node exited 0.
//
// Supervision (--max-restarts N): a node that exits non-zero or dies by a
// signal is started again with the same id, port and arguments (and
// DICE_RESTART_COUNT=k in its environment), after --restart-backoff
// seconds doubling per restart of that node (capped at 30 s), up to N
// times; then the launcher stops the run and exits non-zero. Once any node
// exited 0, or logged "run finished by node ..." (dice's router does when the
// run ends), the run is over and nothing is restarted. Every node runs in
// its own process group: a dead node's leftovers and, on SIGINT/SIGTERM,
// every node's whole group are signalled; groups still alive after
// --stop-timeout seconds (default 10) are killed, and the launcher waits
// for every node before it exits. With --max-restarts every node also gets
// `--dice.spool-dir=` a private directory of its own (made under a fresh
// /tmp/dice-spool-XXXXXX, removed at exit) unless the program's arguments
// name one: a collector spools the context deltas no learner acknowledged
// yet, and its restarted incarnation republishes them (nothing is lost to
// kill -9). `--dice.spool-dir=-` after -- turns that off.

#include "dice/process/spawn.hpp"

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

namespace {

using clock_type = std::chrono::steady_clock;

volatile std::sig_atomic_t signals_seen = 0;
// A node logged the end of the run ("run finished by node ..."): from then
// on a node that exits is not restarted, even if it fails while stopping.
bool finish_seen = false;
volatile std::sig_atomic_t last_signal = 0;

void on_signal(int sig) {
  last_signal = sig;
  signals_seen = signals_seen + 1;
}

/// One child process and its output pipes.
struct child {
  std::uint32_t id = 0;
  std::uint16_t port = 0;
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
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

/// "exit code 3" or "signal 9 (Killed)".
std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status)) + " ("
      + ::strsignal(WTERMSIG(status)) + ")";
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

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
  double startup_timeout = 60;
  /// Restarts per node after a non-zero exit or a signal (0: none).
  std::uint32_t max_restarts = 0;
  /// Wait before a node's first restart; doubles per restart, at most 30 s.
  double restart_backoff = 1.0;
  /// After SIGINT/SIGTERM, kill what is still running after this long.
  double stop_timeout = 10;
  std::vector<std::string> command;
  /// Trust settings every node gets (cluster secret, TLS files).
  std::vector<std::string> pass_through;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "dice-launch: " << why << "\n"
            << "usage: dice-launch --workers N [--learners L] "
               "[--topology star|mesh|alone] "
               "[--ports P[,P...]] [--node-ids I[,I...]] "
               "[--attach-to host:port,...] [--host ADDR] "
               "[--startup-timeout SECONDS] [--max-restarts N] "
               "[--restart-backoff SECONDS] [--stop-timeout SECONDS] "
               "[--dice.secret-file=FILE] "
               "[--openssl.KEY=VALUE ...] -- PROGRAM [ARGS...]\n";
  std::exit(2);
}

std::vector<std::string> split(const std::string& str) {
  std::vector<std::string> result;
  std::size_t pos = 0;
  while (pos <= str.size()) {
    auto next = str.find(',', pos);
    if (next == std::string::npos)
      next = str.size();
    if (next > pos)
      result.push_back(str.substr(pos, next - pos));
    pos = next + 1;
  }
  return result;
}

unsigned long to_num(const std::string& str, unsigned long max,
                     const char* what) {
  char* end = nullptr;
  errno = 0;
  auto x = std::strtoul(str.c_str(), &end, 10);
  if (str.empty() || *end != '\0' || errno != 0 || x > max)
    usage(std::string{"bad "} + what + ": '" + str + "'");
  return x;
}

options parse(int argc, char** argv) {
  options opts;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    std::string arg = argv[i];
    auto eq = arg.find('=');
    if (eq != std::string::npos)
      return arg.substr(eq + 1);
    if (i + 1 >= argc)
      usage("missing value for " + flag);
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    auto flag = arg.substr(0, arg.find('='));
    if (arg == "--") {
      ++i;
      break;
    } else if (flag == "--workers" || flag == "--parallel-workers") {
      opts.workers = static_cast<std::uint32_t>(
        to_num(value(flag), 4096, "--workers"));
    } else if (flag == "--learners") {
      opts.learners = static_cast<std::uint32_t>(
        to_num(value(flag), 65536, "--learners"));
      if (opts.learners == 0)
        usage("--learners must be at least 1");
    } else if (flag == "--topology") {
      opts.topology = value(flag);
      if (opts.topology != "star" && opts.topology != "mesh"
          && opts.topology != "alone")
        usage("unknown topology '" + opts.topology + "'");
    } else if (flag == "--ports") {
      for (auto& p : split(value(flag)))
        opts.ports.push_back(
          static_cast<std::uint16_t>(to_num(p, 65535, "--ports")));
    } else if (flag == "--node-ids") {
      for (auto& p : split(value(flag)))
        opts.node_ids.push_back(
          static_cast<std::uint32_t>(to_num(p, 0xFFFFFFFFul, "--node-ids")));
    } else if (flag == "--attach-to") {
      opts.attach_to = value(flag);
    } else if (flag == "--host" || flag == "--address") {
      opts.host = value(flag);
    } else if (flag == "--startup-timeout") {
      opts.startup_timeout = std::atof(value(flag).c_str());
    } else if (flag == "--max-restarts") {
      opts.max_restarts = static_cast<std::uint32_t>(
        to_num(value(flag), 1000000, "--max-restarts"));
    } else if (flag == "--restart-backoff" || flag == "--stop-timeout") {
      auto str = value(flag);
      char* end = nullptr;
      auto x = std::strtod(str.c_str(), &end);
      if (str.empty() || *end != '\0' || !(x >= 0) || x > 3600)
        usage("bad " + flag + ": '" + str + "' (seconds, 0 to 3600)");
      (flag == "--stop-timeout" ? opts.stop_timeout : opts.restart_backoff) = x;
    } else if (flag == "--dice.secret-file"
               || flag.rfind("--openssl.", 0) == 0) {
      opts.pass_through.push_back(flag + "=" + value(flag));
    } else if (arg == "-h" || arg == "--help") {
      usage("help");
    } else {
      usage("unknown option '" + arg + "'");
    }
  }
  for (; i < argc; ++i)
    opts.command.emplace_back(argv[i]);
  if (opts.command.empty())
    usage("no program given after --");
  if (opts.workers == 0)
    usage("--workers must be at least 1");
  if (opts.learners > opts.workers)
    usage("--learners must not exceed --workers");
  // DI-engine: one id k means k..k+n-1; a list is used as is.
  if (opts.node_ids.size() == 1)
    for (std::uint32_t k = 1; k < opts.workers; ++k)
      opts.node_ids.push_back(opts.node_ids[0] + k);
  if (opts.node_ids.empty())
    for (std::uint32_t k = 0; k < opts.workers; ++k)
      opts.node_ids.push_back(k);
  if (opts.node_ids.size() != opts.workers)
    usage("--node-ids needs one id or one per worker");
  // One port p means p..p+n-1, all of them ports.
  if (opts.ports.size() == 1 && opts.ports[0] != 0
      && opts.ports[0] + (opts.workers - 1ul) > 65535)
    usage("--ports " + std::to_string(opts.ports[0]) + " with "
          + std::to_string(opts.workers) + " workers needs ports up to "
          + std::to_string(opts.ports[0] + (opts.workers - 1ul)) + " > 65535");
  if (opts.ports.size() == 1)
    for (std::uint32_t k = 1; k < opts.workers; ++k)
      opts.ports.push_back(static_cast<std::uint16_t>(opts.ports[0] + k));
  if (!opts.ports.empty() && opts.ports.size() != opts.workers)
    usage("--ports needs one port or one per worker");
  return opts;
}

/// A fresh cluster secret in a private temporary directory (mode 0700,
/// file 0600), for a launch whose user gave none; removed by `remove()`.
struct launch_secret {
  std::string dir;
  std::string path;

  bool make() {
    char tmpl[] = "/tmp/dice-launch-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
      return false;
    dir = tmpl;
    path = dir + "/secret";
    unsigned char raw[32];
    std::size_t got = 0;
    while (got < sizeof(raw)) {
      auto n = ::getrandom(raw + got, sizeof(raw) - got, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      got += static_cast<std::size_t>(n);
    }
    static const char* hex = "0123456789abcdef";
    std::string text;
    for (auto b : raw) {
      text.push_back(hex[b >> 4]);
      text.push_back(hex[b & 15]);
    }
    text.push_back('\n');
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                    0600);
    if (fd < 0)
      return false;
    auto ok = ::write(fd, text.data(), text.size())
      == static_cast<ssize_t>(text.size());
    ::close(fd);
    return ok;
  }

  void remove() {
    if (!path.empty())
      ::unlink(path.c_str());
    if (!dir.empty())
      ::rmdir(dir.c_str());
  }
};

/// With --max-restarts: a private directory (mode 0700) holding one spool
/// directory per node, removed with everything in it by `remove()`.
struct launch_spool {
  std::string dir;

  bool make() {
    char tmpl[] = "/tmp/dice-spool-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
      return false;
    dir = tmpl;
    return true;
  }

  std::string of(std::uint32_t node) const {
    return dir + "/node-" + std::to_string(node);
  }

  void remove() {
    std::error_code ec;
    if (!dir.empty())
      std::filesystem::remove_all(dir, ec);
  }
};

void write_all(int fd, const std::string& str) {
  std::size_t done = 0;
  while (done < str.size()) {
    auto n = ::write(fd, str.data() + done, str.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    done += static_cast<std::size_t>(n);
  }
}

// Prints complete lines of `buf` with the node prefix; scans stdout lines
// for the port announcement.
void flush_lines(child& c, std::string& buf, int fd, bool final) {
  std::size_t pos = 0;
  for (;;) {
    auto nl = buf.find('\n', pos);
    if (nl == std::string::npos)
      break;
    auto line = buf.substr(pos, nl - pos);
    pos = nl + 1;
    if (!finish_seen
        && line.find("] run finished by node ") != std::string::npos)
      finish_seen = true;
    if (fd == STDOUT_FILENO && c.port == 0) {
      auto tag = "dice-node " + std::to_string(c.id) + " listening on port ";
      auto at = line.find(tag);
      if (at != std::string::npos)
        c.port = static_cast<std::uint16_t>(
          std::atoi(line.c_str() + at + tag.size()));
    }
    write_all(fd, "[node " + std::to_string(c.id) + "] " + line + "\n");
  }
  buf.erase(0, pos);
  if (final && !buf.empty()) {
    write_all(fd, "[node " + std::to_string(c.id) + "] " + buf + "\n");
    buf.clear();
  }
}

// Reads what is available from every child for at most `timeout_ms`.
void pump(std::vector<child>& children, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<std::size_t, bool>> who;
  for (std::size_t i = 0; i < children.size(); ++i) {
    auto& c = children[i];
    if (c.out_fd >= 0) {
      fds.push_back(pollfd{c.out_fd, POLLIN, 0});
      who.emplace_back(i, true);
    }
    if (c.err_fd >= 0) {
      fds.push_back(pollfd{c.err_fd, POLLIN, 0});
      who.emplace_back(i, false);
    }
  }
  if (fds.empty()) {
    ::poll(nullptr, 0, timeout_ms);
    return;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0)
    return;
  char buf[65536];
  for (std::size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents == 0)
      continue;
    auto& c = children[who[k].first];
    auto is_out = who[k].second;
    auto& fd = is_out ? c.out_fd : c.err_fd;
    auto& acc = is_out ? c.out_buf : c.err_buf;
    auto n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      acc.append(buf, static_cast<std::size_t>(n));
      flush_lines(c, acc, is_out ? STDOUT_FILENO : STDERR_FILENO, false);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      flush_lines(c, acc, is_out ? STDOUT_FILENO : STDERR_FILENO, true);
      ::close(fd);
      fd = -1;
    }
  }
}

/// What the supervisor knows about the run as a whole.
struct run_state {
  /// A node exited 0: the run ended (finish); nothing is restarted.
  bool over = false;
  /// SIGINT/SIGTERM arrived, or a node exhausted its restarts: stopping.
  bool stopping = false;
  /// When still-running groups get SIGKILL (set once stopping).
  std::optional<clock_type::time_point> kill_at;
};

// Signals a node's whole process group (its own children too).
void signal_group(const child& c, int sig) {
  if (c.pid > 0 && ::kill(-c.pid, sig) != 0)
    ::kill(c.pid, sig); // not (yet) a group leader
}

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
  if (c.restarts > 0)
    opts.env.push_back("DICE_RESTART_COUNT=" + std::to_string(c.restarts));
  auto p = dice::process::spawn(opts);
  if (p.pid < 0) {
    errno = p.error;
    return false;
  }
  c.pid = p.pid;
  c.out_fd = p.out;
  c.err_fd = p.err;
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

// Reads what is left in a dead node's pipes (non-blocking) and closes them.
void drain(child& c) {
  char buf[65536];
  for (auto* fd : {&c.out_fd, &c.err_fd}) {
    if (*fd < 0)
      continue;
    auto is_out = fd == &c.out_fd;
    auto& acc = is_out ? c.out_buf : c.err_buf;
    ::fcntl(*fd, F_SETFL, ::fcntl(*fd, F_GETFL) | O_NONBLOCK);
    for (;;) {
      auto n = ::read(*fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      acc.append(buf, static_cast<std::size_t>(n));
    }
    flush_lines(c, acc, is_out ? STDOUT_FILENO : STDERR_FILENO, true);
    ::close(*fd);
    *fd = -1;
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

} // namespace

int main(int argc, char** argv) {
  dice::process::die_with_parent_if_asked();
  auto opts = parse(argc, argv);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Nodes that listen beyond loopback refuse to start without a secret or
  // TLS; the launcher's own nodes get a fresh secret when the user gave
  // neither (on loopback too: other local users cannot join either).
  launch_secret secret;
  auto has_trust = std::any_of(opts.pass_through.begin(),
                               opts.pass_through.end(), [](auto& x) {
                                 return x.rfind("--dice.secret-file=", 0) == 0
                                   || x.rfind("--openssl.", 0) == 0;
                               });
  if (!has_trust) {
    if (!secret.make()) {
      std::cerr << "[dice-launch] cannot write a cluster secret: "
                << std::strerror(errno) << std::endl;
      secret.remove();
      return 1;
    }
    opts.pass_through.push_back("--dice.secret-file=" + secret.path);
    std::cerr << "[dice-launch] no --dice.secret-file given: this launch's "
                 "nodes share a fresh secret (removed at exit; nodes started "
                 "elsewhere need --dice.secret-file)"
              << std::endl;
  }
  // Supervised nodes spool their unacknowledged context (collectors do),
  // unless the program's own arguments say where or turn it off.
  launch_spool spool;
  auto own_spool = std::any_of(opts.command.begin(), opts.command.end(),
                               [](auto& x) {
                                 return x.rfind("--dice.spool-dir", 0) == 0;
                               });
  if (opts.max_restarts > 0 && !own_spool) {
    if (!spool.make()) {
      std::cerr << "[dice-launch] cannot create a spool directory: "
                << std::strerror(errno) << std::endl;
      secret.remove();
      return 1;
    }
    std::cerr << "[dice-launch] nodes spool unacknowledged context in "
              << spool.dir << " (removed at exit)" << std::endl;
  }
  auto t0 = clock_type::now();
  std::vector<child> children(opts.workers);
  run_state run;
  int forwarded = 0;
  auto deadline = t0
    + std::chrono::milliseconds{
      static_cast<long long>(opts.startup_timeout * 1000)};
  bool failed = false;
  for (std::uint32_t i = 0; i < opts.workers && !failed; ++i) {
    auto& c = children[i];
    c.id = opts.node_ids[i];
    // The peers this node attaches to, as DI-engine's topologies name them.
    std::vector<std::uint32_t> targets;
    if (opts.topology == "mesh")
      for (std::uint32_t j = 0; j < i; ++j)
        targets.push_back(j);
    else if (opts.topology == "star" && i > 0)
      targets.push_back(0);
    std::string attach;
    for (auto j : targets) {
      auto& t = children[j];
      auto port = opts.ports.empty() ? std::uint16_t{0} : opts.ports[j];
      // Wait (bounded) for an ephemeral port to be announced.
      while (port == 0 && t.port == 0 && !t.exit_code && !signals_seen
             && clock_type::now() < deadline) {
        pump(children, 50);
        reap(children, run, opts);
      }
      if (port == 0)
        port = t.port;
      if (port == 0) {
        std::cerr << "[dice-launch] node " << t.id
                  << " did not report its port in time" << std::endl;
        failed = true;
        break;
      }
      if (!attach.empty())
        attach += ',';
      attach += opts.host + ":" + std::to_string(port);
    }
    if (failed)
      break;
    if (!opts.attach_to.empty())
      attach += (attach.empty() ? "" : ",") + opts.attach_to;
    std::vector<std::string> args{opts.command.front()};
    args.push_back("--dice.node-id=" + std::to_string(c.id));
    args.push_back("--dice.workers=" + std::to_string(opts.workers));
    if (opts.learners > 0)
      args.push_back("--dice.learners=" + std::to_string(opts.learners));
    args.push_back("--dice.topology=" + opts.topology);
    args.push_back("--dice.host=" + opts.host);
    if (!opts.ports.empty())
      args.push_back("--dice.port=" + std::to_string(opts.ports[i]));
    if (!attach.empty())
      args.push_back("--dice.attach-to=" + attach);
    args.insert(args.end(), opts.pass_through.begin(), opts.pass_through.end());
    if (!spool.dir.empty())
      args.push_back("--dice.spool-dir=" + spool.of(c.id));
    args.insert(args.end(), opts.command.begin() + 1, opts.command.end());
    c.argv = args;
    if (!spawn(c, args)) {
      std::cerr << "[dice-launch] cannot start node " << c.id << " ("
                << args.front() << "): " << std::strerror(errno) << std::endl;
      failed = true;
    } else {
      std::cerr << "[dice-launch] node " << c.id << " started, pid " << c.pid
                << std::endl;
    }
  }
  if (!failed) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                clock_type::now() - t0)
                .count();
    std::cerr << "[dice-launch] started " << opts.workers << " nodes in " << ms
              << " ms" << std::endl;
  } else {
    stop_all(children, run, opts, SIGTERM);
  }
  for (;;) {
    forward_signals(children, run, opts, forwarded);
    restart_due(children, opts);
    // Wake up in time for the next restart.
    int wait_ms = 100;
    for (auto& c : children)
      if (c.restart_at)
        wait_ms = std::min<int>(
          wait_ms,
          static_cast<int>(std::max<long long>(
            0,
            std::chrono::duration_cast<std::chrono::milliseconds>(
              *c.restart_at - clock_type::now())
              .count())));
    pump(children, wait_ms);
    reap(children, run, opts);
    auto running = std::any_of(
      children.begin(), children.end(), [](const child& c) {
        return (c.pid > 0 && !c.exit_code) || c.restart_at;
      });
    auto open = std::any_of(children.begin(), children.end(),
                            [](const child& c) {
                              return c.out_fd >= 0 || c.err_fd >= 0;
                            });
    if (!running && !open)
      break;
    if (!running) // drain what is left in the pipes, then stop
      pump(children, 0);
  }
  secret.remove();
  spool.remove();
  int rc = failed ? 1 : 0;
  std::uint32_t restarts = 0;
  for (auto& c : children)
    restarts += c.restarts;
  // The node that exhausted its restarts names the failure, not the
  // others the launcher stopped because of it.
  for (auto& c : children)
    if (c.given_up && rc == 0)
      rc = c.exit_code && *c.exit_code != 0 ? *c.exit_code : 1;
  for (auto& c : children)
    if (c.exit_code && *c.exit_code != 0 && rc == 0)
      rc = *c.exit_code;
  if (opts.max_restarts > 0) {
    // One line a script can read: restarts in total and per node.
    std::cerr << "[dice-launch] summary: " << opts.workers << " nodes, "
              << restarts << " restart(s)";
    for (auto& c : children)
      if (c.restarts > 0 || c.given_up) {
        std::cerr << "; node " << c.id << ": " << c.restarts
                  << " restart(s) after";
        for (std::size_t k = 0; k < c.deaths.size(); ++k)
          std::cerr << (k == 0 ? " " : ", ") << c.deaths[k];
        if (c.given_up)
          std::cerr << ", gave up";
      }
    std::cerr << "; exit code " << rc << std::endl;
  }
  return rc;
}
