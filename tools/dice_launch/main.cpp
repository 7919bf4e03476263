// dice-launch: starts N local processes of a dice program as the nodes of one
// cluster (the `ditask --parallel-workers N` of dice).
//
//   dice-launch --workers N [--learners L] [--topology star|mesh|alone]
//               [--ports P] [--node-ids I[,I...]] [--attach-to host:port,...]
//               [--host ADDR] [--fork-server]
//               [--max-restarts N] [--restart-backoff S] [--stop-timeout S]
//               [--dice.secret-file=F] [--openssl.KEY=V ...] -- PROGRAM ...
//
// Each node gets `--dice.node-id= --dice.workers= --dice.topology=
// --dice.host= --dice.port= --dice.listen-fd=3 --dice.attach-to=` on its
// command line (and `--dice.learners=L` with --learners: nodes 0..L-1 are
// learners forming one data-parallel group, docs/learner_group.md), right
// after the program, or after all of its arguments when the program is a
// Python interpreter (`-- python3 pipeline.py`, read by dice.run). Nodes
// listen on --host (default 127.0.0.1: loopback only), on a socket the
// launcher bound before it started any node (ports.cpp; an ephemeral port
// without --ports) and passes as fd 3, so all nodes start at once. With
// --fork-server the program starts once and every node (and restart) is
// forked from it (dice::process::fork_client): LibTorch loads once.
// --dice.secret-file and --openssl.* options go to
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

#include "launch.hpp"

namespace dice_launch {

volatile std::sig_atomic_t signals_seen = 0;
bool finish_seen = false;
volatile std::sig_atomic_t last_signal = 0;
std::optional<dice::process::fork_client> forks;

namespace {

/// True for a Python interpreter (python, python3, python3.11, ...).
bool is_python(const std::string& program) {
  auto name = program.substr(program.rfind('/') + 1);
  return name.rfind("python", 0) == 0;
}

void on_signal(int sig) {
  last_signal = sig;
  signals_seen = signals_seen + 1;
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
    dice::unique_fd fd{
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
    if (!fd)
      return false;
    return ::write(fd.get(), text.data(), text.size())
      == static_cast<ssize_t>(text.size());
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

} // namespace

} // namespace dice_launch

using namespace dice_launch;

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
  if (opts.fork_server) {
    forks = dice::process::fork_client::start(opts.command.front(),
                                              std::chrono::seconds{60});
    if (!forks)
      std::cerr << "[dice-launch] " << opts.command.front()
                << " did not start as a fork server (not a DICE_MAIN "
                   "program?): starting every node on its own"
                << std::endl;
    else
      std::cerr << "[dice-launch] nodes are forked from one instance of "
                << opts.command.front() << " (fork server pid " << forks->pid()
                << ")" << std::endl;
  }
  std::vector<child> children(opts.workers);
  run_state run;
  int forwarded = 0;
  bool failed = false;
  // Every port is bound before any node starts: the nodes start at once.
  for (std::uint32_t i = 0; i < opts.workers && !failed; ++i) {
    auto& c = children[i];
    c.id = opts.node_ids[i];
    std::string why;
    c.listen_fd = listen_on(
      opts.host, opts.ports.empty() ? std::uint16_t{0} : opts.ports[i], c.port,
      why);
    if (!c.listen_fd) {
      std::cerr << "[dice-launch] cannot listen on " << opts.host << ":"
                << (opts.ports.empty() ? 0 : opts.ports[i]) << " for node "
                << c.id << ": " << why << std::endl;
      failed = true;
    }
  }
  for (std::uint32_t i = 0; i < opts.workers && !failed; ++i) {
    auto& c = children[i];
    // The peers this node attaches to, as DI-engine's topologies name them.
    std::vector<std::uint32_t> targets;
    if (opts.topology == "mesh")
      for (std::uint32_t j = 0; j < i; ++j)
        targets.push_back(j);
    else if (opts.topology == "star" && i > 0)
      targets.push_back(0);
    std::string attach;
    for (auto j : targets) {
      if (!attach.empty())
        attach += ',';
      attach += opts.host + ":" + std::to_string(children[j].port);
    }
    if (!opts.attach_to.empty())
      attach += (attach.empty() ? "" : ",") + opts.attach_to;
    std::vector<std::string> args{opts.command.front()};
    // A Python interpreter reads options of its own before the script: its
    // node gets the settings after the script's arguments (dice.run reads
    // them there).
    auto interpreter = is_python(opts.command.front());
    if (interpreter)
      args.assign(opts.command.begin(), opts.command.end());
    args.push_back("--dice.node-id=" + std::to_string(c.id));
    args.push_back("--dice.workers=" + std::to_string(opts.workers));
    if (opts.learners > 0)
      args.push_back("--dice.learners=" + std::to_string(opts.learners));
    args.push_back("--dice.topology=" + opts.topology);
    args.push_back("--dice.host=" + opts.host);
    if (!opts.ports.empty())
      args.push_back("--dice.port=" + std::to_string(opts.ports[i]));
    args.push_back("--dice.listen-fd=3");
    if (!attach.empty())
      args.push_back("--dice.attach-to=" + attach);
    args.insert(args.end(), opts.pass_through.begin(), opts.pass_through.end());
    if (!spool.dir.empty())
      args.push_back("--dice.spool-dir=" + spool.of(c.id));
    if (!interpreter)
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
                              return c.out_fd || c.err_fd;
                            });
    if (!running && !open)
      break;
    if (!running) // drain what is left in the pipes, then stop
      pump(children, 0);
  }
  for (auto& c : children)
    c.listen_fd.reset();
  if (forks)
    forks->stop();
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
