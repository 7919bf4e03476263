// dice-launch: starts N local processes of a dice program as the nodes of one
// cluster (the `ditask --parallel-workers N` of dice).
//
//   dice-launch --workers N [--topology star|mesh|alone] [--ports P]
//               [--node-ids I[,I...]] [--attach-to host:port,...]
//               [--host ADDR] [--startup-timeout S]
//               [--dice.secret-file=F] [--openssl.KEY=V ...] -- PROGRAM ...
//
// Each node gets `--dice.node-id= --dice.workers= --dice.topology=
// --dice.host= --dice.port= --dice.attach-to=` on its command line. Nodes
// listen on --host (default 127.0.0.1: loopback only). Without --ports
// every node listens on an ephemeral port, which the launcher reads from
// the node's "dice-node ID listening on port P" line before starting the
// nodes that attach to it. --dice.secret-file and --openssl.* options go to
// every node unchanged (one cluster shares its secret and CA); with
// neither, the launcher writes a fresh random secret to a private
// temporary file for its nodes and removes it at exit. Output lines are
// prefixed with "[node ID] "; SIGINT/SIGTERM are forwarded; the exit code
// is 0 only if every node exited 0.

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
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
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

volatile std::sig_atomic_t signals_seen = 0;
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
};

struct options {
  std::uint32_t workers = 1;
  std::string topology = "mesh";
  std::vector<std::uint16_t> ports;
  std::vector<std::uint32_t> node_ids;
  std::string attach_to;
  /// Address every node listens on and is reached at.
  std::string host = "127.0.0.1";
  double startup_timeout = 60;
  std::vector<std::string> command;
  /// Trust settings every node gets (cluster secret, TLS files).
  std::vector<std::string> pass_through;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "dice-launch: " << why << "\n"
            << "usage: dice-launch --workers N [--topology star|mesh|alone] "
               "[--ports P[,P...]] [--node-ids I[,I...]] "
               "[--attach-to host:port,...] [--host ADDR] "
               "[--startup-timeout SECONDS] [--dice.secret-file=FILE] "
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

void reap(std::vector<child>& children) {
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
    std::cerr << "[dice-launch] node " << c.id << " exited with code "
              << *c.exit_code << std::endl;
  }
}

bool spawn(child& c, const std::vector<std::string>& argv) {
  int out[2];
  int err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0)
    return false;
  auto parent = ::getpid();
  auto pid = ::fork();
  if (pid < 0)
    return false;
  if (pid == 0) {
    // A node must not outlive its launcher (e.g. killed by a test).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)
      ::_exit(127);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::close(err[0]);
    ::close(err[1]);
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "dice-launch: cannot run %s: %s\n", args[0],
                 std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  c.pid = pid;
  c.out_fd = out[0];
  c.err_fd = err[0];
  return true;
}

void forward_signals(std::vector<child>& children, int& forwarded) {
  if (signals_seen == forwarded)
    return;
  forwarded = signals_seen;
  // The first signal asks nicely; a second one kills.
  auto sig = forwarded > 1 ? SIGKILL : static_cast<int>(last_signal);
  for (auto& c : children)
    if (c.pid > 0 && !c.exit_code)
      ::kill(c.pid, sig);
}

} // namespace

int main(int argc, char** argv) {
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
  auto t0 = clock_type::now();
  std::vector<child> children(opts.workers);
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
        reap(children);
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
    args.push_back("--dice.topology=" + opts.topology);
    args.push_back("--dice.host=" + opts.host);
    if (!opts.ports.empty())
      args.push_back("--dice.port=" + std::to_string(opts.ports[i]));
    if (!attach.empty())
      args.push_back("--dice.attach-to=" + attach);
    args.insert(args.end(), opts.pass_through.begin(), opts.pass_through.end());
    args.insert(args.end(), opts.command.begin() + 1, opts.command.end());
    if (!spawn(c, args)) {
      std::cerr << "[dice-launch] cannot start node " << c.id << ": "
                << std::strerror(errno) << std::endl;
      failed = true;
    }
  }
  if (!failed) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                clock_type::now() - t0)
                .count();
    std::cerr << "[dice-launch] started " << opts.workers << " nodes in " << ms
              << " ms" << std::endl;
  } else {
    for (auto& c : children)
      if (c.pid > 0)
        ::kill(c.pid, SIGTERM);
  }
  for (;;) {
    forward_signals(children, forwarded);
    pump(children, 100);
    reap(children);
    auto running = std::any_of(children.begin(), children.end(),
                               [](const child& c) {
                                 return c.pid > 0 && !c.exit_code;
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
  int rc = failed ? 1 : 0;
  for (auto& c : children)
    if (c.exit_code && *c.exit_code != 0 && rc == 0)
      rc = *c.exit_code;
  return rc;
}
