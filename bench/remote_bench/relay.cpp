// remote_bench relay: the learner publishes model snapshots to N collector
// processes connected as a mesh (each listens; each attaches to the learner
// and to every collector started before it), with the relay broadcast on
// (--relay 1, default) or off (--relay 0), the same-host shortcut off. Per
// round: the learner's bytes out on data connections and the time until
// every collector acked. Each ack carries the checksum of the bytes the
// collector loaded, compared with the learner's. --kill K: collector K is
// stopped (SIGSTOP) before the middle round and killed (SIGKILL) once a
// first collector acked that round, so its subtree is waiting on it; every
// other collector must still ack every version, once and in order.
// --deadline S: the learner's relay deadline (default 5 s); --fanout K:
// children per node of the relay tree (default 2; 1 is a chain). --relay
// auto: the learner times both ways and keeps the faster (the JSON says
// which). --hosts A0,A1,..,AN: the learner listens on A0 and collector i on
// Ai (default: all on 127.0.0.1); --netns NS1,..,NSN: collector i runs in
// network namespace NSi (`ip netns exec`; the learner is run in its own by
// the caller: scripts/netns-hosts sets such hosts up).
// Also the process behind tests/net/relay_process_test.cpp.

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/process/spawn.hpp"
#include "net/data_plane.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace dice::bench::remote {

namespace {

// "a,b,c" as {a, b, c}.
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> xs;
  for (std::size_t at = 0; at < text.size();) {
    auto end = text.find(',', at);
    if (end == std::string::npos)
      end = text.size();
    xs.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return xs;
}

// Reads the child's "listening on port P" line (30 s at most), then copies
// the rest of its output to stderr on a thread, so the pipe never fills.
std::optional<std::uint16_t> read_port(dice::unique_fd fd) {
  std::string buf;
  std::optional<std::uint16_t> port;
  auto deadline = clk::now() + 30s;
  std::regex re{"listening on port ([0-9]+)"};
  while (!port && clk::now() < deadline) {
    pollfd p{fd.get(), POLLIN, 0};
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clk::now());
    if (::poll(&p, 1, static_cast<int>(std::max<long>(ms.count(), 1))) <= 0)
      break;
    char tmp[512];
    auto n = ::read(fd.get(), tmp, sizeof(tmp));
    if (n <= 0)
      break;
    buf.append(tmp, static_cast<std::size_t>(n));
    std::smatch m;
    if (std::regex_search(buf, m, re))
      port = static_cast<std::uint16_t>(std::stoul(m[1].str()));
  }
  // The thread owns the pipe and closes it when the child's output ends.
  std::thread{[fd = std::move(fd)] {
    char tmp[4096];
    for (;;) {
      auto n = ::read(fd.get(), tmp, sizeof(tmp));
      if (n <= 0)
        break;
      [[maybe_unused]] auto w = ::write(2, tmp, static_cast<std::size_t>(n));
    }
  }}.detach();
  return port;
}

// Starts the mesh: collector i attaches to the learner and collectors
// 1..i-1 (their ports read from their output).
std::optional<std::vector<pid_t>> start_mesh(int argc, char** argv, long n,
                                             std::uint16_t port) {
  std::vector<pid_t> pids;
  std::string peers;
  auto netns = split(arg("netns", ""));
  // `ip netns exec` runs the program by its path (/proc/self/exe would
  // then name ip).
  char exe[4096];
  auto len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0)
    return std::nullopt;
  exe[len] = 0;
  for (long i = 0; i < n; ++i) {
    dice::process::spawn_options opts;
    opts.argv = collector_argv(argc, argv, port, i + 1);
    opts.argv.insert(opts.argv.end(), {"--path", "data", "--mesh", "1"});
    if (!netns.empty()) {
      opts.argv[0] = exe;
      opts.argv.insert(opts.argv.begin(),
                       {"ip", "netns", "exec",
                        netns.at(static_cast<std::size_t>(i))});
    }
    if (!peers.empty())
      opts.argv.insert(opts.argv.end(), {"--peers", peers});
    opts.output = dice::process::capture::merged;
    opts.death_signal = SIGTERM;
    auto c = dice::process::spawn(opts);
    if (c.pid < 0) {
      stop_all(pids);
      return std::nullopt;
    }
    pids.push_back(c.pid);
    auto p = read_port(std::move(c.out));
    if (!p) {
      stop_all(pids);
      return std::nullopt;
    }
    peers += (peers.empty() ? "" : ",") + std::to_string(*p);
  }
  return pids;
}

} // namespace

std::string relay_host(long node) {
  auto hosts = split(arg("hosts", ""));
  if (hosts.empty())
    return "127.0.0.1";
  return hosts.at(static_cast<std::size_t>(node));
}

int relay_main(int argc, char** argv) {
  auto n = num("collectors", 8);
  auto hosts = split(arg("hosts", ""));
  auto netns = split(arg("netns", ""));
  if ((!hosts.empty() && hosts.size() != static_cast<std::size_t>(n + 1))
      || (!netns.empty() && netns.size() != static_cast<std::size_t>(n))) {
    std::fprintf(stderr,
                 "remote_bench relay: --hosts needs the learner's "
                 "address and one per collector, --netns one "
                 "namespace per collector\n");
    return 1;
  }
  auto size = num("size", 6'800'000);
  auto rounds = num("rounds", 10);
  auto relay_text = arg("relay", "1");
  auto relay = dice::parse_relay_mode(relay_text);
  if (!relay) {
    std::fprintf(stderr, "remote_bench relay: --relay 0, 1 or auto\n");
    return 1;
  }
  auto kill = num("kill", 0);
  auto deadline = num("deadline", 5);
  auto fanout = num("fanout", 2);
  config cfg;
  caf::actor_system sys{cfg};
  auto nc = node_settings(0, true, "data");
  nc.topo = dice::topology::mesh;
  nc.relay = *relay;
  nc.host = relay_host(0);
  // Namespaces of their own: no one else reaches these addresses.
  nc.insecure = !hosts.empty();
  nc.relay_deadline = std::chrono::seconds{deadline};
  nc.relay_fanout = static_cast<std::size_t>(fanout);
  std::cout.setstate(std::ios::failbit); // its "listening on" line
  auto dn = dice::node::start(sys, nc);
  std::cout.clear();
  if (!dn)
    return 1;
  dn->data_plane()->set_same_host(false);
  auto router = dn->router();
  caf::scoped_actor self{sys};
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{"ack"});
  self->receive([](const std::vector<dice::finish>&) {});
  auto started = start_mesh(argc, argv, n, dn->port());
  if (!started) {
    dn->stop();
    return 2;
  }
  auto pids = std::move(*started);
  // Each collector says it is ready (seq 0) once its mesh and data
  // connections are up and it subscribed.
  long ready = 0;
  while (ready < n) {
    bool timeout = false;
    self->receive(
      [&](const std::string&, const dice::context_delta& d) {
        if (d.seq == 0)
          ++ready;
      },
      caf::after(60s) >>
        [&] {
          timeout = true;
        });
    if (timeout) {
      stop_all(pids);
      dn->stop();
      return 5;
    }
  }
  auto x = make_snapshot(size);
  auto sum = dice::checksum64(x.data.data(), x.data.size());
  std::map<std::uint32_t, std::vector<std::int64_t>> got;
  std::vector<double> times;
  auto total = rounds + 2;
  auto stats0 = dice::net::data_stats();
  auto choices0 = dice::relay_choices();
  bool digests_equal = true;
  std::uint32_t killed = 0;
  for (long r = 0; r < total; ++r) {
    if (r == 2)
      stats0 = dice::net::data_stats(); // two warm-up rounds
    x.version = r + 1;
    auto t0 = clk::now();
    // The victim is stopped before the round and killed once the round is
    // under way (a first collector acked it): it holds its references and
    // its subtree waits on it.
    auto victim = kill > 0 ? pids[static_cast<std::size_t>(kill - 1)] : 0;
    bool kill_now = kill > 0 && r == total / 2;
    if (kill_now)
      ::kill(victim, SIGSTOP);
    self->send(router, dice::publish_atom::value, std::string{"model"},
               std::uint32_t{0}, caf::make_message(std::string{"model"}, x));
    long want = killed || kill_now ? n - 1 : n;
    long acks = 0;
    while (acks < want) {
      bool timeout = false;
      self->receive(
        [&](const std::string&, const dice::context_delta& d) {
          if (d.seq == 0)
            return;
          got[d.sender].push_back(static_cast<std::int64_t>(d.seq));
          if (d.base != sum)
            digests_equal = false;
          if (d.seq != static_cast<std::uint64_t>(x.version)
              || d.sender
                == static_cast<std::uint32_t>(kill_now ? kill : killed))
            return;
          if (kill_now && !killed) {
            ::kill(victim, SIGKILL);
            killed = static_cast<std::uint32_t>(kill);
          }
          ++acks;
        },
        caf::after(30s) >>
          [&] {
            timeout = true;
          });
      if (timeout) {
        std::fprintf(stderr, "remote_bench relay: round %ld timed out\n", r);
        stop_all(pids);
        dn->stop();
        return 3;
      }
    }
    if (r >= 2)
      times.push_back(secs(clk::now() - t0));
  }
  auto stats1 = dice::net::data_stats();
  auto choices = dice::relay_choices();
  stop_all(pids);
  // Every survivor got every version, once, in order.
  bool complete = true;
  for (long i = 1; i <= n; ++i) {
    auto node = static_cast<std::uint32_t>(i);
    if (node == killed)
      continue;
    std::vector<std::int64_t> want;
    for (long v = 1; v <= total; ++v)
      want.push_back(v);
    if (got[node] != want)
      complete = false;
  }
  std::sort(times.begin(), times.end());
  auto med = times[times.size() / 2];
  auto worst = times.back();
  auto out = static_cast<double>(stats1.bytes_sent - stats0.bytes_sent)
    / static_cast<double>(rounds);
  print_json(
    {{"mode", "relay"},
     {"relay", relay_text},
     {"hosts", hosts.empty() ? "loopback" : "one each"},
     {"collectors", n},
     {"fanout", fanout},
     {"size", size},
     {"round_s", med},
     {"max_round_s", worst},
     {"learner_bytes_out_per_round", out},
     {"learner_out_per_model", out / static_cast<double>(size)},
     {"relay_rounds", stats1.relay_rounds - stats0.relay_rounds},
     {"relay_fallbacks", stats1.relay_fallbacks - stats0.relay_fallbacks},
     {"digests_equal", digests_equal},
     {"killed", killed},
     {"survivors_complete", complete},
     {"auto_tree_choices", choices.tree - choices0.tree},
     {"auto_star_choices", choices.star - choices0.star}});
  dn->stop();
  return 0;
}

} // namespace dice::bench::remote
