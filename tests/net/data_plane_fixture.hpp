// The data-plane tests' fixture (tests/net/data_plane*_test.cpp): two
// planes over real loopback sockets in one process, node 2 (the dialer)
// attached to node 1 (the acceptor) through a control session
// (net/data_auth.hpp), and the helpers an attacker on the data channel
// uses. Ephemeral ports; every wait has a deadline.
#pragma once

#include "dice/logging/log.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"
#include "net/data_auth.hpp"
#include "net/data_plane.hpp"
#include "net/data_wire.hpp"
#include "net/dialer.hpp"
#include "net/listener.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include "support/data_listener.hpp"
#include "support/deterministic.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace dice::test::plane {

using namespace std::chrono_literals;
using dice::net::channel;
using dice::net::data_offer;
using dice::net::data_plane;
using clock_type = dice::net::deadline_clock;
namespace fs = std::filesystem;

using dice::test::secret_1;

struct data_plane_system_config : caf::actor_system_config {
  data_plane_system_config() {
    dice::add_message_types(*this);
  }
};

inline dice::shared_bytes pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> xs(n);
  for (std::size_t i = 0; i < n; ++i)
    xs[i] = static_cast<std::uint8_t>(i * 131 + seed);
  return dice::shared_bytes{std::move(xs)};
}

// What a peer got back after an attempt: everything it read until the
// acceptor closed, or the deadline.
struct outcome {
  bool closed = false;
  std::size_t bytes = 0;
};

inline outcome wait_closed(int fd, std::chrono::milliseconds within,
                           std::string* got = nullptr) {
  outcome r;
  auto deadline = clock_type::now() + within;
  char buf[4096];
  while (clock_type::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - clock_type::now())
                  .count();
    if (::poll(&p, 1, static_cast<int>(std::max<long>(left, 1))) <= 0)
      continue;
    auto k = ::recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) {
      r.closed = true;
      return r;
    }
    r.bytes += static_cast<std::size_t>(k);
    if (got != nullptr)
      got->append(buf, static_cast<std::size_t>(k));
  }
  return r;
}

// The control session's key exchange as the router does it in the hello:
// node `attacher` attaches to node 1.
struct session_keys {
  std::shared_ptr<data_offer> mine;
  std::string theirs;
  std::string key;
};

class DataPlane : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path()
                        / ("dice-dplane-" + std::to_string(::getpid())));
    auto cmd = std::string{"bash "} + DICE_SOURCE_DIR
      + "/scripts/make-test-certs " + dir_->string() + " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  // The cluster's TLS files; "stranger-": a self-signed pair that trusts
  // only itself.
  static dice::tls_files certs(const std::string& prefix = "") {
    return {
      (*dir_ / (prefix + "cert.pem")).string(),
      (*dir_ / (prefix + "key.pem")).string(),
      (*dir_ / (prefix.empty() ? "ca.pem" : prefix + "cert.pem")).string()};
  }

  // TLS files of both planes (none: plain TCP).
  virtual dice::tls_files tls() const {
    return {};
  }

  void SetUp() override {
    dice::net::data_plane_config c1;
    c1.tls = tls();
    c1.node = 1;
    c1.secret = secret_1;
    c1.io_timeout = 5s;
    c1.max_transfer_bytes = 4 << 20;
    c1.max_peer_bytes = 8 << 20;
    // Bytes on the socket here; the same-host test turns the shortcut on.
    c1.same_host = false;
    acceptor = data_plane::make(sys, c1);
    auto c2 = c1;
    c2.node = 2;
    dialer = data_plane::make(sys, c2);
    auto ln = dice::test::open_data_listener(acceptor, secret_1);
    ASSERT_TRUE(ln) << caf::to_string(ln.error());
    listener = std::move(*ln);
    port = listener->port();
  }

  void TearDown() override {
    listener->stop();
    dialer->stop();
    acceptor->stop();
  }

  // Connects on the data channel, up to the bind frame (plain TCP);
  // `binding` receives the preamble's nonces.
  int dial_data(const std::string& key = secret_1,
                std::string* binding = nullptr) {
    auto fd = dice::net::dial_channel(key, "127.0.0.1", port, channel::data,
                                      clock_type::now() + 2s, binding);
    return fd ? fd->release() : -1; // the test's to close
  }

  // The hello between node `attacher` and the acceptor (node 1).
  session_keys hello(std::uint32_t attacher = 2) {
    session_keys r;
    r.mine = data_offer::make();
    r.theirs = acceptor->accept_session(attacher, r.mine->pub());
    auto dh = r.mine->agree(r.theirs);
    if (dh)
      r.key = dice::net::data_session_key(secret_1, 1, attacher, r.mine->pub(),
                                          r.theirs, *dh);
    return r;
  }

  // The dialer (node 2) opens both data connections to the acceptor.
  void connect_planes() {
    auto h = hello();
    dialer->dial(1, "127.0.0.1", port, h.mine, h.theirs);
  }

  // Connects the planes, then sends 3 MiB from the dialer and 1 MiB from
  // the acceptor at once: both arrive whole. `id_x_out`: the dialer's transfer.
  void bytes_both_ways(std::uint64_t* id_x_out = nullptr) {
    connect_planes();
    ASSERT_TRUE(dialer->wait_sendable(1, 5s));
    ASSERT_TRUE(acceptor->wait_sendable(2, 5s));
    auto x = pattern(3 << 20, 7);
    auto y = pattern(1 << 20, 9);
    auto id_x = dialer->send(1, std::make_shared<dice::net::data_item>(x));
    auto id_y = acceptor->send(2, std::make_shared<dice::net::data_item>(y));
    ASSERT_TRUE(id_x && id_y);
    if (id_x_out != nullptr)
      *id_x_out = *id_x;
    auto got_x = take(*acceptor, 2, *id_x);
    auto got_y = take(*dialer, 1, *id_y);
    ASSERT_TRUE(got_x) << caf::to_string(got_x.error());
    ASSERT_TRUE(got_y) << caf::to_string(got_y.error());
    ASSERT_EQ(got_x->size(), x.size());
    EXPECT_EQ(std::memcmp(got_x->data(), x.data(), x.size()), 0);
    ASSERT_EQ(got_y->size(), y.size());
    EXPECT_EQ(std::memcmp(got_y->data(), y.data(), y.size()), 0);
  }

  // A bind frame as node `node` with session key `key` on a connection
  // whose preamble nonces are `binding` (plain TCP).
  static std::string bind(std::uint8_t dir, std::uint32_t node,
                          const std::string& key, const std::string& binding) {
    return dice::net::encode_bind(
      {dir, node, dice::net::data_bind_mac(key, dir, binding, {})});
  }

  bool send_bytes(int fd, const std::string& xs) {
    return !dice::net::send_all(fd, xs, clock_type::now() + 2s);
  }

  caf::expected<dice::shared_bytes> take(data_plane& dp, std::uint32_t peer,
                                         std::uint64_t id) {
    caf::scoped_actor self{sys};
    caf::expected<dice::shared_bytes> result{caf::error{}};
    self->request(dp.inbox(), 10s, dice::net::data_take_atom::value, peer, id)
      .receive(
        [&](dice::shared_bytes& x) {
          result = std::move(x);
        },
        [&](caf::error& err) {
          result = std::move(err);
        });
    return result;
  }

  data_plane_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<data_plane> acceptor;
  std::shared_ptr<data_plane> dialer;
  std::unique_ptr<dice::net::listener> listener;
  std::uint16_t port = 0;
  static inline fs::path* dir_ = nullptr;
};

} // namespace dice::test::plane
