// Multi-process figures over loopback, each with its baseline measured by
// the same program in the same run (bench/run drives it):
//   remote_bench tcp --size S --rounds R         raw TCP, one stream
//   remote_bench snapshot --collectors N --size S --rounds R [--path P]
//     P = data (default): nodes as dice runs them (preamble, data plane)
//     with the same-host shortcut off (bytes on the data connection);
//     P = shm: the same-host shortcut on (sealed memfd, a reference on the
//     socket); P = basp: the data plane off (BASP chunks).
//     --tls DIR: every node runs TLS with DIR/{cert,key,ca}.pem
//     (scripts/make-test-certs), on BASP and on data connections alike.
//   remote_bench context --collectors N --obs K --batch B --seconds T
// The parent is the learner; it forks N collector processes (this same
// binary) that attach to its router on an ephemeral port. One JSON line out.

#include "dice/actors/router.hpp"
#include "dice/runtime/node.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/net/data_plane.hpp"
#include "dice/process/spawn.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/io/middleman.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/scoped_actor.hpp"

#include "bench_options.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Options after the mode.
const std::vector<std::string> known_options{
  "size",   "rounds", "collectors", "obs",  "batch", "seconds", "chunk",
  "window", "port",   "node",       "mode", "path",  "tls"};

// --tls DIR (empty: no TLS).
std::string tls_dir;

std::string arg(int argc, char** argv, const std::string& name,
                const std::string& fallback) {
  return dice::bench::option(argc, argv, 2, name, fallback);
}

long num(int argc, char** argv, const std::string& name, long fallback) {
  return std::stol(arg(argc, argv, name, std::to_string(fallback)));
}

using dice::bench::print_json;

double secs(clk::duration d) {
  return std::chrono::duration<double>(d).count();
}

// -- raw TCP baseline
// -----------------------------------------------------------

int tcp_main(long size, long rounds) {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len);
  ::listen(ls, 1);
  auto pid = ::fork();
  if (pid == 0) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    std::vector<char> buf(1 << 20);
    for (long r = 0; r < rounds + 2; ++r) {
      long got = 0;
      while (got < size) {
        auto k = ::read(s, buf.data(),
                        std::min<long>(static_cast<long>(buf.size()),
                                       size - got));
        if (k <= 0)
          _exit(1);
        got += k;
      }
      char ack = 1;
      if (::write(s, &ack, 1) != 1)
        _exit(1);
    }
    _exit(0);
  }
  int s = ::accept(ls, nullptr, nullptr);
  std::vector<char> data(static_cast<std::size_t>(size), 7);
  std::vector<double> times;
  for (long r = 0; r < rounds + 2; ++r) {
    auto t0 = clk::now();
    long sent = 0;
    while (sent < size) {
      auto k = ::write(s, data.data() + sent, size - sent);
      if (k <= 0)
        return 1;
      sent += k;
    }
    char ack;
    if (::read(s, &ack, 1) != 1)
      return 1;
    if (r >= 2) // two warm-up rounds, as for snapshots
      times.push_back(secs(clk::now() - t0));
  }
  ::waitpid(pid, nullptr, 0);
  std::sort(times.begin(), times.end());
  auto med = times[times.size() / 2];
  print_json({{"mode", "tcp"},
              {"size", size},
              {"round_s", med},
              {"bytes_per_s", static_cast<double>(size) / med}});
  return 0;
}

// -- dice nodes
// -------------------------------------------------------------------

struct config : caf::actor_system_config {
  config() {
    load<caf::io::middleman>();
    load<caf::openssl::manager>();
    dice::add_message_types(*this);
    if (!tls_dir.empty()) {
      openssl_certificate = tls_dir + "/cert.pem";
      openssl_key = tls_dir + "/key.pem";
      openssl_cafile = tls_dir + "/ca.pem";
    }
  }
};

// Settings of a bench node on loopback.
dice::node_config node_settings(std::uint32_t id, bool listen,
                                const std::string& path) {
  dice::node_config nc;
  nc.id = id;
  nc.distributed = true;
  nc.listen = listen;
  nc.host = "127.0.0.1";
  nc.port = 0;
  nc.peer_loss_timeout = std::chrono::hours{1};
  nc.data_channel = path != "basp";
  if (!tls_dir.empty())
    nc.tls = {tls_dir + "/cert.pem", tls_dir + "/key.pem", tls_dir + "/ca.pem"};
  return nc;
}

std::vector<pid_t> fork_collectors(int argc, char** argv, long n,
                                   std::uint16_t port) {
  std::vector<pid_t> pids;
  for (long i = 0; i < n; ++i) {
    dice::process::spawn_options opts;
    opts.argv = {"/proc/self/exe",     "collector", "--port",
                 std::to_string(port), "--node",    std::to_string(i + 1)};
    for (int j = 2; j < argc; ++j)
      opts.argv.emplace_back(argv[j]);
    opts.output = dice::process::capture::none;
    // Collectors run until the learner's SIGTERM: or until it is gone.
    opts.death_signal = SIGTERM;
    auto c = dice::process::spawn(opts);
    if (c.pid < 0) {
      std::fprintf(stderr, "remote_bench: cannot start a collector: %s\n",
                   std::strerror(c.error));
      continue;
    }
    pids.push_back(c.pid);
  }
  return pids;
}

void stop_all(const std::vector<pid_t>& pids) {
  for (auto p : pids)
    ::kill(p, SIGTERM);
  for (auto p : pids)
    ::waitpid(p, nullptr, 0);
}

dice::model_snapshot make_snapshot(long size) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size), 3);
  dice::snapshot_builder b{dice::snapshot_builder::padded(bytes.size())};
  b.add("w", dice::dtype::uint8, {size}, bytes.data(), bytes.size());
  return b.build(0, 1, 0, 0);
}

// A collector node: answers each snapshot with an ack, or streams context.
int collector_main(int argc, char** argv) {
  config cfg;
  caf::actor_system sys{cfg};
  auto node = static_cast<std::uint32_t>(num(argc, argv, "node", 1));
  auto mode = arg(argc, argv, "mode", "snapshot");
  auto path = arg(argc, argv, "path", "");
  dice::router_actor router;
  std::optional<dice::node> dn;
  if (!path.empty()) {
    // A dice node (dialer, preamble, data plane unless --path basp).
    auto n = dice::node::start(sys, node_settings(node, false, path));
    if (!n)
      _exit(4);
    dn = std::move(*n);
    router = dn->router();
    if (dn->data_plane())
      dn->data_plane()->set_same_host(path == "shm");
  } else {
    dice::router_config bc;
    bc.node = node;
    router = sys.spawn(dice::router_behavior, bc);
  }
  caf::scoped_actor self{sys};
  auto ack_topic = std::string{"ack"};
  if (mode == "snapshot") {
    auto member = sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
      return {[](const dice::peer_event&) {},
              [=](const std::string&, const dice::model_snapshot& x) {
                dice::context_delta d;
                d.sender = node;
                d.seq = static_cast<std::uint64_t>(x.version);
                me->send(router, dice::publish_atom::value, ack_topic, node,
                         caf::make_message(ack_topic, d));
              }};
    });
    self->send(router, dice::join_atom::value, node, dice::role_set{}, member,
               std::vector<std::string>{"model"});
    self->receive([](const std::vector<dice::finish>&) {});
    self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"},
               static_cast<std::uint16_t>(num(argc, argv, "port", 0)));
    for (;;)
      std::this_thread::sleep_for(1h); // until the learner's SIGTERM
  }
  // context: stream deltas of `batch` transitions, at most `window` in
  // flight (the learner acks each delta).
  auto obs = num(argc, argv, "obs", 4);
  auto batch = num(argc, argv, "batch", 1000);
  auto window = num(argc, argv, "window", 8);
  // One transition: obs, next_obs, action, reward, done as floats.
  std::vector<float> items(static_cast<std::size_t>(batch * (2 * obs + 3)),
                           0.5f);
  auto p = dice::pack(items, node);
  p.count = static_cast<std::uint64_t>(batch);
  self->send(router, dice::join_atom::value, node, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{ack_topic});
  self->receive([](const std::vector<dice::finish>&) {});
  self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"},
             static_cast<std::uint16_t>(num(argc, argv, "port", 0)));
  self->request(router, 30s, dice::peers_atom::value, std::uint32_t{1})
    .receive([](std::uint32_t) {},
             [](caf::error&) {
               _exit(2);
             });
  auto topic = std::string{"context_exchanger_collector"};
  std::uint64_t seq = 0;
  long in_flight = 0;
  for (;;) {
    while (in_flight < window) {
      dice::context_delta d;
      d.sender = node;
      d.seq = ++seq;
      d.env_step = batch;
      d.trajectories = {p};
      self->send(router, dice::publish_atom::value, topic, node,
                 caf::make_message(topic, std::move(d)));
      ++in_flight;
    }
    self->receive([&](const std::string&, const dice::context_delta& a) {
      if (a.sender == node)
        --in_flight;
    });
  }
}

// A node that attaches to --port and publishes snapshots of --size bytes on
// "model" until killed, printing "sent V" after each (the same-host tests
// kill it with -9 in the middle).
int publisher_main(int argc, char** argv) {
  config cfg;
  caf::actor_system sys{cfg};
  auto node = static_cast<std::uint32_t>(num(argc, argv, "node", 1));
  auto path = arg(argc, argv, "path", "shm");
  auto dn = dice::node::start(sys, node_settings(node, false, path));
  if (!dn)
    return 4;
  if (dn->data_plane())
    dn->data_plane()->set_same_host(path == "shm");
  auto router = dn->router();
  caf::scoped_actor self{sys};
  self->send(router, dice::join_atom::value, node, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{});
  self->receive([](const std::vector<dice::finish>&) {});
  self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"},
             static_cast<std::uint16_t>(num(argc, argv, "port", 0)));
  self->request(router, 30s, dice::peers_atom::value, std::uint32_t{1})
    .receive([](std::uint32_t) {},
             [](caf::error&) {
               _exit(2);
             });
  auto& dp = dn->data_plane();
  if (dp && path == "shm" && !dp->wait_same_host(0, 10s))
    _exit(3);
  auto x = make_snapshot(num(argc, argv, "size", 6'800'000));
  x.sender = node; // peers refuse a snapshot that names another node
  for (std::int64_t v = 1;; ++v) {
    x.version = v;
    self->send(router, dice::publish_atom::value, std::string{"model"}, node,
               caf::make_message(std::string{"model"}, x));
    std::printf("sent %lld\n", static_cast<long long>(v));
    std::fflush(stdout);
    // Paced by the receiver's acks would need a topic; a short pause
    // keeps the queue from growing without bound.
    self->receive(caf::after(std::chrono::milliseconds{20}) >> [] {});
  }
}

int snapshot_main(int argc, char** argv) {
  auto n = num(argc, argv, "collectors", 1);
  auto size = num(argc, argv, "size", 6'800'000);
  auto rounds = num(argc, argv, "rounds", 10);
  auto path = arg(argc, argv, "path", "data");
  config cfg;
  caf::actor_system sys{cfg};
  // The learner is a dice node listening on an ephemeral port.
  std::cout.setstate(std::ios::failbit); // its "listening on" line
  auto dn = dice::node::start(sys, node_settings(0, true, path));
  std::cout.clear();
  if (!dn)
    return 1;
  if (dn->data_plane())
    dn->data_plane()->set_same_host(path == "shm");
  auto router = dn->router();
  auto port = std::optional<std::uint16_t>{dn->port()};
  std::vector<std::string> extra{"--path", path};
  std::vector<char*> args(argv, argv + argc);
  for (auto& e : extra)
    args.push_back(e.data());
  caf::scoped_actor self{sys};
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{"ack"});
  self->receive([](const std::vector<dice::finish>&) {});
  auto pids = fork_collectors(static_cast<int>(args.size()), args.data(), n,
                              *port);
  bool ok = true;
  self
    ->request(router, 30s, dice::peers_atom::value, static_cast<std::uint32_t>(n))
    .receive([](std::uint32_t) {},
             [&](caf::error&) {
               ok = false;
             });
  if (!ok) {
    stop_all(pids);
    return 2;
  }
  // Every data connection is up before the first round.
  if (auto& dp = dn->data_plane())
    for (long i = 0; i < n; ++i)
      if (!dp->wait_sendable(static_cast<std::uint32_t>(i + 1), 10s)) {
        stop_all(pids);
        return 5;
      }
  auto stats0 = dice::net::data_stats();
  auto x = make_snapshot(size);
  std::vector<double> times;
  for (long r = 0; r < rounds + 2; ++r) {
    x.version = r + 1;
    auto t0 = clk::now();
    self->send(router, dice::publish_atom::value, std::string{"model"},
               std::uint32_t{0}, caf::make_message(std::string{"model"}, x));
    long acks = 0;
    while (acks < n) {
      bool timeout = false;
      self->receive(
        [&](const std::string&, const dice::context_delta& d) {
          if (d.seq == static_cast<std::uint64_t>(x.version))
            ++acks;
        },
        caf::after(30s) >>
          [&] {
            timeout = true;
          });
      if (timeout) {
        stop_all(pids);
        return 3;
      }
    }
    if (r >= 2) // two warm-up rounds
      times.push_back(secs(clk::now() - t0));
  }
  stop_all(pids);
  auto stats1 = dice::net::data_stats();
  std::sort(times.begin(), times.end());
  auto med = times[times.size() / 2];
  print_json({{"mode", "snapshot"},
              {"path", path},
              {"tls", !tls_dir.empty()},
              {"collectors", n},
              {"size", size},
              {"round_s", med},
              {"bytes_per_s", static_cast<double>(size) * n / med},
              {"data_transfers", stats1.transfers_sent - stats0.transfers_sent},
              {"shm_transfers", stats1.shm_sent - stats0.shm_sent},
              {"fallbacks", stats1.fallbacks - stats0.fallbacks}});
  dn->stop();
  return 0;
}

int context_main(int argc, char** argv) {
  auto n = num(argc, argv, "collectors", 3);
  auto obs = num(argc, argv, "obs", 4);
  auto seconds = std::stod(arg(argc, argv, "seconds", "3"));
  config cfg;
  caf::actor_system sys{cfg};
  dice::router_config bc;
  bc.node = 0;
  auto router = sys.spawn(dice::router_behavior, bc);
  auto port = sys.middleman().publish(router, 0, "127.0.0.1");
  if (!port)
    return 1;
  caf::scoped_actor self{sys};
  auto topic = std::string{"context_exchanger_collector"};
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{topic});
  self->receive([](const std::vector<dice::finish>&) {});
  std::vector<std::string> extra{"--mode", "context"};
  std::vector<char*> args(argv, argv + argc);
  for (auto& e : extra)
    args.push_back(e.data());
  auto pids = fork_collectors(static_cast<int>(args.size()), args.data(), n,
                              *port);
  bool ok = true;
  self
    ->request(router, 30s, dice::peers_atom::value, static_cast<std::uint32_t>(n))
    .receive([](std::uint32_t) {},
             [&](caf::error&) {
               ok = false;
             });
  if (!ok) {
    stop_all(pids);
    return 2;
  }
  std::uint64_t transitions = 0;
  std::uint64_t bytes = 0;
  auto ack = std::string{"ack"};
  auto handle = [&](const std::string&, const dice::context_delta& d) {
    transitions += dice::item_count(d.trajectories);
    for (auto& p : d.trajectories)
      bytes += p.bytes.size();
    dice::context_delta a;
    a.sender = d.sender;
    self->send(router, dice::publish_atom::value, ack, std::uint32_t{0},
               caf::make_message(ack, a));
  };
  // Warm-up, then count.
  auto warm = clk::now() + 500ms;
  while (clk::now() < warm)
    self->receive(
      handle, caf::after(1s) >> [] {});
  transitions = 0;
  bytes = 0;
  auto t0 = clk::now();
  auto end = t0
    + std::chrono::duration_cast<clk::duration>(
               std::chrono::duration<double>(seconds));
  while (clk::now() < end)
    self->receive(
      handle, caf::after(1s) >> [] {});
  auto dt = secs(clk::now() - t0);
  stop_all(pids);
  print_json({{"mode", "context"},
              {"collectors", n},
              {"obs", obs},
              {"transitions_per_s", static_cast<double>(transitions) / dt},
              {"bytes_per_s", static_cast<double>(bytes) / dt}});
  self->send_exit(router, caf::exit_reason::user_shutdown);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  dice::process::die_with_parent_if_asked();
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: remote_bench tcp|snapshot|context|collector "
                 "[--size S] [--rounds R] [--collectors N] ...\n");
    return 1;
  }
  std::string mode = argv[1];
  if (auto why = dice::bench::check_options(argc, argv, 2, known_options);
      !why.empty())
    return dice::bench::refuse("remote_bench", why, known_options);
  tls_dir = arg(argc, argv, "tls", "");
  if (mode == "tcp")
    return tcp_main(num(argc, argv, "size", 6'800'000),
                    num(argc, argv, "rounds", 10));
  if (mode == "collector")
    return collector_main(argc, argv);
  if (mode == "snapshot")
    return snapshot_main(argc, argv);
  if (mode == "publisher")
    return publisher_main(argc, argv);
  if (mode == "context")
    return context_main(argc, argv);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 1;
}
