// TLS through CAF's openssl session, over real loopback sockets, started
// after dice's preamble on the same socket: nodes with certificates from
// the same CA connect; a plain-TCP client (dice's or CAF's own) and a
// client with a certificate the CA did not sign get nothing. Certificate
// settings are checked before CAF sees them (it aborts on a bad path).

#include "dice/actors/router.hpp"
#include "dice/core/errc.hpp"
#include "dice/runtime/node.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "net/dialer.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

/// Makes the certificates once for all tests (scripts/make-test-certs).
class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path()
                        / ("dice-tls-" + std::to_string(::getpid())));
    auto cmd = std::string{"bash "} + DICE_SOURCE_DIR
      + "/scripts/make-test-certs " + dir_->string() + " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  static std::string file(const char* name) {
    return (*dir_ / name).string();
  }

  static dice::tls_files good() {
    return {file("cert.pem"), file("key.pem"), file("ca.pem")};
  }

  static dice::tls_files stranger() {
    return {file("stranger-cert.pem"), file("stranger-key.pem"),
            file("ca.pem")};
  }

  /// An actor system with the middleman, the openssl module and `files`.
  static std::unique_ptr<caf::actor_system> make_system(dice::tls_files files) {
    auto cfg = std::make_unique<dice::node_system_config>();
    cfg->openssl_certificate = files.certificate;
    cfg->openssl_key = files.key;
    cfg->openssl_cafile = files.cafile;
    configs_.push_back(std::move(cfg));
    return std::make_unique<caf::actor_system>(*configs_.back());
  }

  /// Starts a listening TLS node on an ephemeral loopback port.
  std::uint16_t start_server(caf::actor_system& sys) {
    dice::node_config nc;
    nc.id = 0;
    nc.distributed = true;
    nc.host = "127.0.0.1";
    nc.tls = good();
    nc.peer_loss_timeout = 1h;
    auto n = dice::node::start(sys, nc);
    EXPECT_TRUE(n) << dice::render(n.error());
    server_ = std::move(*n);
    return server_->port();
  }

  /// How a client dials.
  enum class via {
    /// A dice node: preamble, then TLS with `files` (none: plain BASP).
    dice,
    /// dice's dialer without the node's checks of `files` (a stranger's
    /// certificate passes no validation).
    dialer,
    /// CAF's own connect (a router without dialer), plain or TLS.
    caf,
  };

  /// Number of peers a client router has after `deadline` (or once it has one).
  std::uint32_t connect(caf::actor_system& sys, via how, dice::tls_files files,
                        std::uint16_t port, caf::timespan deadline) {
    dice::router_actor b;
    if (how == via::dice) {
      dice::node_config nc;
      nc.id = 1;
      nc.distributed = true;
      nc.listen = false;
      nc.tls = files;
      nc.connect_timeout = 500ms;
      nc.peer_loss_timeout = 1h;
      auto n = dice::node::start(sys, nc);
      if (!n) {
        ADD_FAILURE() << dice::render(n.error());
        return 0;
      }
      b = n->router();
    } else if (how == via::dialer) {
      dice::router_config bc;
      bc.node = 1;
      bc.connect_timeout = 500ms;
      bc.dialer = dice::net::spawn_dialer(sys, {1, "", files.any(), 500ms});
      b = dice::spawn_router(sys, bc);
    } else {
      dice::router_config bc;
      bc.node = 1;
      bc.tls = files.any();
      bc.connect_timeout = 500ms;
      b = dice::spawn_router(sys, bc);
    }
    caf::scoped_actor self{sys};
    self->send(b, dice::attach_atom::value, std::string{"127.0.0.1"}, port);
    std::uint32_t n = 0;
    self->request(b, deadline, dice::peers_atom::value, std::uint32_t{1})
      .receive(
        [&](std::uint32_t x) {
          n = x;
        },
        [&](caf::error&) {
          n = 0;
        });
    self->send_exit(b, caf::exit_reason::user_shutdown);
    return n;
  }

  // The server's node must stop before its system is destroyed (the system
  // waits for every actor).
  void TearDown() override {
    if (server_)
      server_->stop();
    server_.reset();
    server_sys_.reset();
  }

  std::unique_ptr<caf::actor_system> server_sys_;
  std::optional<dice::node> server_;
  static inline fs::path* dir_ = nullptr;
  // Configs must outlive their systems; systems are destroyed per test.
  static inline std::vector<std::unique_ptr<dice::node_system_config>> configs_;
};

TEST_F(Tls, SettingsAreCheckedBeforeCafSeesThem) {
  EXPECT_FALSE(dice::validate(good()));
  auto x = good();
  x.cafile.clear();
  EXPECT_TRUE(dice::is(dice::validate(x), dice::errc::invalid_config));
  x = good();
  x.certificate = file("missing.pem");
  EXPECT_TRUE(dice::is(dice::validate(x), dice::errc::invalid_config));
  x = good();
  x.key = file("stranger-key.pem");
  auto err = dice::validate(x);
  EXPECT_NE(dice::render(err).find("does not match"), std::string::npos)
    << dice::render(err);
  err = dice::validate(stranger());
  EXPECT_NE(dice::render(err).find("not signed by the CA"), std::string::npos)
    << dice::render(err);
}

TEST_F(Tls, NodesOfOneCaConnect) {
  server_sys_ = make_system(good());
  auto port = start_server(*server_sys_);
  ASSERT_NE(port, 0);
  auto client = make_system(good());
  EXPECT_EQ(connect(*client, via::dice, good(), port, 5s), 1u);
}

TEST_F(Tls, PlainTcpAndForeignCertificatesGetNothing) {
  server_sys_ = make_system(good());
  auto port = start_server(*server_sys_);
  ASSERT_NE(port, 0);
  {
    // Passes the preamble (no secret here), then speaks plain BASP to a
    // TLS server: the TLS handshake fails.
    auto plain = make_system({});
    EXPECT_EQ(connect(*plain, via::dice, {}, port, 1500ms), 0u);
  }
  {
    // Not even the preamble.
    auto plain = make_system({});
    EXPECT_EQ(connect(*plain, via::caf, {}, port, 1500ms), 0u);
  }
  {
    auto foreign = make_system(stranger());
    EXPECT_EQ(connect(*foreign, via::dialer, stranger(), port, 1500ms), 0u);
  }
  {
    // CAF's own TLS client, with a good certificate, but no preamble.
    auto caf_tls = make_system(good());
    EXPECT_EQ(connect(*caf_tls, via::caf, good(), port, 1500ms), 0u);
  }
}

} // namespace
