// A node publishes its router's gate: a remote peer that sends it exit
// messages — even exit_reason::kill, which no CAF handler can trap — stops
// neither the gate nor the router (real middleman, loopback, port 0).

#include "actors/gate.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using namespace std::chrono_literals;

struct gate_system_config : caf::actor_system_config {
  gate_system_config() {
    load<caf::io::middleman>();
    dice::add_message_types(*this);
    set("logger.verbosity", caf::atom("quiet"));
  }
};

TEST(Gate, RemoteExitsEvenKillStopNeitherGateNorRouter) {
  gate_system_config server_cfg;
  caf::actor_system server{server_cfg};
  auto router = dice::spawn_router(server, dice::router_config{});
  auto gate = dice::gate_of(server, router);
  ASSERT_TRUE(gate) << caf::to_string(gate.error());
  auto port = server.middleman().publish(*gate, 0, "127.0.0.1", true);
  ASSERT_TRUE(port) << caf::to_string(port.error());
  gate_system_config client_cfg;
  caf::actor_system client{client_cfg};
  auto proxy = client.middleman().remote_actor("127.0.0.1", *port);
  ASSERT_TRUE(proxy) << caf::to_string(proxy.error());
  auto before = dice::counter(dice::trust_event::remote_exit_ignored);
  caf::scoped_actor self{client};
  self->send_exit(*proxy, caf::exit_reason::kill);
  self->send_exit(*proxy, caf::exit_reason::user_shutdown);
  // Sent after the exits on the same connection: an answer (the gate asks
  // the router) proves that the gate and the router behind it are still there.
  bool answered = false;
  self->request(*proxy, 10s, dice::hello_atom::value, dice::random_nonce())
    .receive(
      [&](const std::string&, const std::string&) {
        answered = true;
      },
      [&](caf::error& err) {
        ADD_FAILURE() << "no answer after remote exits: "
                      << caf::to_string(err);
      });
  EXPECT_TRUE(answered);
  EXPECT_EQ(dice::counter(dice::trust_event::remote_exit_ignored), before + 2);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
}

} // namespace
