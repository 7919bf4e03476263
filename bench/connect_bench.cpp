// Connection set-up between two dice nodes on loopback, with baselines
// measured in the same run: a raw TCP connect plus one round trip, and the
// path dice used before its preamble (CAF's own publish and connect, the
// router handshake on top).
//
//   connect_bench [--rounds R] [--secret 0|1]
//
// Each round starts a fresh client actor system (CAF reuses a connection
// between two systems), attaches its router to the server's and times attach
// -> connected peer (the client router answers `peers(1)`), the three paths
// in turn each round. One JSON line out: medians in seconds; connect_s is a
// node as it runs (data plane on: its key exchange rides in the router's
// hello), connect_no_data_plane_s the same router as CAF's path, so that
// only the transport set-up (dialer, preamble, hand-over) differs.

#include "actors/gate.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/node.hpp"

#include "caf/actor_system.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"

#include "bench_options.hpp"
#include "loopback.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::vector<dice::bench::option_spec> specs{
  {"rounds", dice::bench::value_kind::integer,
   "connections timed per path (20)"},
  {"secret", dice::bench::value_kind::integer,
   "the cluster secret on (1, default) or off (0)"},
};

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

// Raw TCP: connect, one byte there and back.
std::vector<double> tcp_rounds(long rounds) {
  std::uint16_t port = 0;
  dice::unique_fd ls{dice::bench::listen_loopback(16, port)};
  if (!ls)
    return {};
  auto addr = dice::bench::loopback_address(port);
  std::thread echo{[&] {
    for (long r = 0; r < rounds; ++r) {
      dice::unique_fd s{::accept(ls.get(), nullptr, nullptr)};
      char c;
      if (::read(s.get(), &c, 1) == 1 && ::write(s.get(), &c, 1) != 1)
        break;
    }
  }};
  std::vector<double> times;
  for (long r = 0; r < rounds; ++r) {
    auto t0 = clk::now();
    dice::unique_fd s{::socket(AF_INET, SOCK_STREAM, 0)};
    ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    char c = 1;
    if (::write(s.get(), &c, 1) != 1 || ::read(s.get(), &c, 1) != 1)
      break;
    times.push_back(std::chrono::duration<double>(clk::now() - t0).count());
  }
  echo.join();
  return times;
}

// Times attach -> connected peer of a client router spawned by `make_router` in
// a fresh actor system (CAF reuses a connection between two systems).
// A client node (if any) is stopped before its system ends, as a node's
// owner does (its data plane's threads end with node::stop).
template <class MakeRouter>
double attach_once(long round, std::uint16_t port, MakeRouter make_router) {
  dice::node_system_config cfg;
  caf::actor_system sys{cfg};
  std::optional<dice::node> client;
  auto router = make_router(sys, static_cast<std::uint32_t>(round + 1), client);
  caf::scoped_actor self{sys};
  auto t0 = clk::now();
  self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"}, port);
  bool ok = false;
  self->request(router, 10s, dice::peers_atom::value, std::uint32_t{1})
    .receive(
      [&](std::uint32_t) {
        ok = true;
      },
      [](caf::error&) {});
  auto t = std::chrono::duration<double>(clk::now() - t0).count();
  if (client)
    client->stop();
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  if (!ok) {
    std::fprintf(stderr, "round %ld: no connection\n", round);
    std::exit(3);
  }
  return t;
}

// A dice node listening on loopback (listener, preamble, hand-over), with
// or without its data plane.
dice::node start_server(caf::actor_system& sys, const std::string& secret,
                        bool data_channel) {
  dice::node_config sc;
  sc.id = 0;
  sc.host = "127.0.0.1";
  sc.distributed = true;
  sc.secret = secret;
  sc.data_channel = data_channel;
  sc.peer_loss_timeout = std::chrono::hours{1};
  auto server = dice::node::start(sys, sc);
  if (!server) {
    std::fprintf(stderr, "server: %s\n", dice::render(server.error()).c_str());
    std::exit(1);
  }
  return std::move(*server);
}

// A client dice node's router (dialer, preamble, hand-over), in `sys`.
dice::router_actor client_router(caf::actor_system& sys, std::uint32_t id,
                                 const std::string& secret, bool data_channel,
                                 std::optional<dice::node>& holder) {
  dice::node_config cc;
  cc.id = id;
  cc.listen = false;
  cc.distributed = true;
  cc.secret = secret;
  cc.data_channel = data_channel;
  cc.peer_loss_timeout = std::chrono::hours{1};
  auto client = dice::node::start(sys, cc);
  if (!client)
    std::exit(2);
  holder = std::move(*client);
  return holder->router();
}

} // namespace

int main(int argc, char** argv) {
  auto parsed = dice::bench::parse_options(
    "connect_bench",
    "Connection set-up between two dice nodes on loopback, with baselines.",
    specs, {}, argc, argv);
  if (auto* code = std::get_if<int>(&parsed))
    return *code;
  auto& given = std::get<dice::bench::option_values>(parsed);
  auto rounds = given.integer("rounds", 20);
  auto with_secret = given.integer("secret", 1) != 0;
  dice::log::set_threshold(dice::log::level::error);
  std::string secret = with_secret ? "0123456789abcdef0123456789abcdef" : "";
  // Three servers, each in its own actor system, measured round by round in
  // turn, so that the load of this (shared) machine weighs on each alike:
  // dice as a node runs (data plane on), dice with the data plane off (the
  // same router as CAF's path below: only the transport set-up differs),
  // and CAF's own path.
  dice::node_system_config dice_cfg;
  caf::actor_system dice_sys{dice_cfg};
  auto dice_server = start_server(dice_sys, secret, true);
  dice::node_system_config bare_cfg;
  caf::actor_system bare_sys{bare_cfg};
  auto bare_server = start_server(bare_sys, secret, false);
  // caf: the router's gate published with CAF's own publish, peers dialled by
  // CAF's own connect (what node::start did before the preamble).
  dice::node_system_config caf_cfg;
  caf::actor_system caf_sys{caf_cfg};
  dice::router_config bc;
  bc.node = 0;
  bc.secret = secret;
  auto router = dice::spawn_router(caf_sys, bc);
  auto gate = dice::spawn_gate(caf_sys, router);
  auto port = caf_sys.middleman().publish(gate, 0, "127.0.0.1", true);
  if (!port)
    return 1;
  std::vector<double> dice_times;
  std::vector<double> bare_times;
  std::vector<double> caf_times;
  for (long r = 0; r < rounds; ++r) {
    dice_times.push_back(
      attach_once(r, dice_server.port(),
                  [&](caf::actor_system& sys, std::uint32_t id, auto& holder) {
                    return client_router(sys, id, secret, true, holder);
                  }));
    bare_times.push_back(
      attach_once(r, bare_server.port(),
                  [&](caf::actor_system& sys, std::uint32_t id, auto& holder) {
                    return client_router(sys, id, secret, false, holder);
                  }));
    caf_times.push_back(attach_once(
      r, *port, [&](caf::actor_system& sys, std::uint32_t id, auto&) {
        dice::router_config cc;
        cc.node = id + 1000;
        cc.secret = secret;
        return dice::spawn_router(sys, cc);
      }));
  }
  dice_server.stop();
  bare_server.stop();
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  auto tcp = tcp_rounds(rounds);
  dice::bench::print_json(
    {{"mode", "connect"},
     {"secret", with_secret ? 1 : 0},
     {"rounds", rounds},
     {"connect_s", median(dice_times)},
     {"connect_max_s", *std::max_element(dice_times.begin(), dice_times.end())},
     {"connect_no_data_plane_s", median(bare_times)},
     {"caf_connect_s", median(caf_times)},
     {"tcp_s", median(tcp)}});
  return 0;
}
