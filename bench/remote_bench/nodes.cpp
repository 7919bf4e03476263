// What the modes that run dice nodes share.

#include "dice/core/errc.hpp"
#include "dice/process/spawn.hpp"
#include "dice/type_ids.hpp"
#include "net/data_plane.hpp"

#include "caf/io/middleman.hpp"
#include "caf/openssl/manager.hpp"

#include "remote_bench.hpp"
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace dice::bench::remote {

std::string tls_dir;
bool coalesce = true;
bool idle_poll = true;

config::config() {
  load<caf::io::middleman>();
  load<caf::openssl::manager>();
  dice::add_message_types(*this);
  // --idle-poll 0: as dice::rl::run_config sets them for every RL node, an
  // idle CAF worker waits on its condition variable (a message wakes it)
  // instead of polling 100 times, then 500 times 50 us apart (CAF's
  // defaults, kept by --idle-poll 1). A round that crosses a dozen actor
  // hops pays a sleeping poller's 50 us (plus timer slack) at many of them.
  if (!idle_poll) {
    set("work-stealing.aggressive-poll-attempts", 0);
    set("work-stealing.moderate-poll-attempts", 0);
  }
  if (!tls_dir.empty()) {
    openssl_certificate = tls_dir + "/cert.pem";
    openssl_key = tls_dir + "/key.pem";
    openssl_cafile = tls_dir + "/ca.pem";
  }
}

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
  nc.coalesce = coalesce;
  if (!tls_dir.empty())
    nc.tls = {tls_dir + "/cert.pem", tls_dir + "/key.pem", tls_dir + "/ca.pem"};
  return nc;
}

std::optional<dice::node> start_node(caf::actor_system& sys, std::uint32_t id,
                                     bool listen, const std::string& path) {
  // A listening node prints its "listening on" line for launchers; the
  // bench's stdout is its one JSON line.
  if (listen)
    std::cout.setstate(std::ios::failbit);
  auto dn = dice::node::start(sys, node_settings(id, listen, path));
  std::cout.clear();
  if (!dn) {
    std::fprintf(stderr, "remote_bench: node %u cannot start: %s\n", id,
                 dice::render(dn.error()).c_str());
    return std::nullopt;
  }
  if (dn->data_plane()) {
    dn->data_plane()->set_same_host(path == "shm");
    if (auto m = num("min-bytes", 0); m > 0)
      dn->data_plane()->set_min_bytes(static_cast<std::size_t>(m));
  }
  return std::move(*dn);
}

std::vector<std::string> collector_argv(int argc, char** argv,
                                        std::uint16_t port, long node) {
  std::vector<std::string> result{"/proc/self/exe", "collector",
                                  "--port",         std::to_string(port),
                                  "--node",         std::to_string(node)};
  for (int j = 2; j < argc; ++j)
    result.emplace_back(argv[j]);
  return result;
}

std::vector<pid_t> fork_collectors(int argc, char** argv, long n,
                                   std::uint16_t port) {
  std::vector<pid_t> pids;
  for (long i = 0; i < n; ++i) {
    dice::process::spawn_options opts;
    opts.argv = collector_argv(argc, argv, port, i + 1);
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

std::optional<std::vector<pid_t>>
start_collectors(caf::scoped_actor& self, const dice::router_actor& router,
                 int argc, char** argv, std::vector<std::string> extra, long n,
                 std::uint16_t port) {
  std::vector<char*> args(argv, argv + argc);
  for (auto& e : extra)
    args.push_back(e.data());
  auto pids = fork_collectors(static_cast<int>(args.size()), args.data(), n,
                              port);
  bool ok = true;
  self
    ->request(router, std::chrono::seconds{30}, dice::peers_atom::value,
              static_cast<std::uint32_t>(n))
    .receive([](std::uint32_t) {},
             [&](caf::error&) {
               ok = false;
             });
  if (!ok) {
    stop_all(pids);
    return std::nullopt;
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

} // namespace dice::bench::remote
