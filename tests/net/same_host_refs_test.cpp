// A same-host peer with a valid session that sends bad references (as a
// broken or hostile insider would): each one is refused and delivers
// nothing, the connection stays up, and a good reference after them
// arrives whole. Real loopback sockets and real memfds, one process;
// ephemeral ports; every wait has a deadline.

#include "dice/security/auth.hpp"
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
#include "support/secret_file.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::net::channel;
using dice::net::data_offer;
using dice::net::data_plane;
using clock_type = dice::net::deadline_clock;

using dice::test::secret_1;

struct refs_system_config : caf::actor_system_config {
  refs_system_config() {
    dice::add_message_types(*this);
  }
};

constexpr int all_seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
  | F_SEAL_WRITE;

// A memfd laid out as a snapshot segment (net/data_shm.cpp: magic, tag,
// size, the bytes at 4 KiB), sealed with `seals`.
int segment_fd(std::uint64_t tag, const std::vector<std::uint8_t>& body,
               int seals) {
  auto fd = ::memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return -1;
  char header[24];
  std::uint64_t n = body.size();
  std::memcpy(header, "DICESHM2", 8);
  std::memcpy(header + 8, &tag, 8);
  std::memcpy(header + 16, &n, 8);
  if (::ftruncate(fd, static_cast<off_t>(4096 + n)) != 0
      || ::pwrite(fd, header, sizeof(header), 0) != 24
      || ::pwrite(fd, body.data(), n, 4096) != static_cast<ssize_t>(n)
      || (seals != 0 && ::fcntl(fd, F_ADD_SEALS, seals) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string frame(const std::array<char, dice::net::data_header_size>& x) {
  return std::string{x.data(), x.size()};
}

class SameHostRefs : public ::testing::Test {
 protected:
  void SetUp() override {
    dice::net::data_plane_config c;
    c.node = 1;
    c.secret = secret_1;
    c.io_timeout = 5s;
    c.max_transfer_bytes = 4 << 20;
    c.max_peer_bytes = 8 << 20;
    c.same_host = true;
    acceptor = data_plane::make(sys, c);
    auto ln = dice::test::open_data_listener(acceptor, secret_1);
    ASSERT_TRUE(ln) << caf::to_string(ln.error());
    listener = std::move(*ln);
  }

  void TearDown() override {
    listener->stop();
    acceptor->stop();
  }

  // A data connection of node 2, bound to a real control session.
  int bound_writer() {
    std::string binding;
    auto fd = dice::net::dial_channel(secret_1, "127.0.0.1", listener->port(),
                                      channel::data, clock_type::now() + 2s,
                                      &binding);
    if (!fd)
      return -1;
    auto mine = data_offer::make();
    auto theirs = acceptor->accept_session(2, mine->pub());
    auto dh = mine->agree(theirs);
    if (!dh)
      return -1; // closes the connection
    auto key = dice::net::data_session_key(secret_1, 1, 2, mine->pub(), theirs,
                                           *dh);
    auto dir = dice::net::data_dialer_writes;
    auto bind = dice::net::encode_bind(
      {dir, 2, dice::net::data_bind_mac(key, dir, binding, {})});
    if (dice::net::send_all(fd->get(), bind, clock_type::now() + 2s)
        || !dice::net::recv_exactly(fd->get(), dice::net::data_ack_size,
                                    clock_type::now() + 2s))
      return -1;          // closes the connection
    return fd->release(); // the test's to close
  }

  caf::expected<dice::shared_bytes> take(std::uint64_t id) {
    caf::scoped_actor self{sys};
    caf::expected<dice::shared_bytes> result{caf::error{}};
    self
      ->request(acceptor->inbox(), 10s, dice::net::data_take_atom::value,
                std::uint32_t{2}, id)
      .receive(
        [&](dice::shared_bytes& x) {
          result = std::move(x);
        },
        [&](caf::error& err) {
          result = std::move(err);
        });
    return result;
  }

  refs_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<data_plane> acceptor;
  std::unique_ptr<dice::net::listener> listener;
};

TEST_F(SameHostRefs, BadReferencesDeliverNothingAndTheLinkSurvives) {
  auto before = dice::net::data_stats();
  auto fd = bound_writer();
  ASSERT_GE(fd, 0);
  // The probe that makes this connection a same-host one.
  auto token = dice::random_nonce(16);
  auto probe = ::memfd_create("probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(probe, 0);
  ASSERT_EQ(::pwrite(probe, token.data(), token.size(), 0), 16);
  ASSERT_EQ(::fcntl(probe, F_ADD_SEALS, all_seals), 0);
  std::vector<std::uint8_t> body(1 << 20);
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<std::uint8_t>(i * 7 + 1);
  // A segment anyone may resize (a view of it could fault past its end),
  // one whose header names another tag (a stale reference), one in the
  // middle of a rewrite (tag 0), and a good one.
  auto unsealed = segment_fd(5, body, 0);
  auto good = segment_fd(5, body, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW);
  auto rewriting = segment_fd(0, body,
                              F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW);
  ASSERT_TRUE(unsealed >= 0 && good >= 0 && rewriting >= 0);
  auto ref = [&](int seg, std::uint64_t id, std::uint64_t tag) {
    return frame(dice::net::encode_ref(
      {static_cast<std::uint32_t>(seg), id, body.size(), tag}));
  };
  auto frames = frame(dice::net::encode_probe(
                  {static_cast<std::uint32_t>(::getpid()),
                   static_cast<std::uint32_t>(probe), token}))
    + ref(unsealed, 1, 5) + ref(good, 2, 6) + ref(rewriting, 3, 0)
    + ref(good, 4, 5);
  ASSERT_FALSE(dice::net::send_all(fd, frames, clock_type::now() + 2s));
  // The good one arrives whole on the same connection, after the others.
  auto got = take(4);
  ASSERT_TRUE(got) << caf::to_string(got.error());
  ASSERT_EQ(got->size(), body.size());
  EXPECT_EQ(std::memcmp(got->data(), body.data(), body.size()), 0);
  for (std::uint64_t id : {1, 2, 3})
    EXPECT_FALSE(take(id)) << "transfer " << id;
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.torn - before.torn, 3u);
  EXPECT_EQ(after.shm_received - before.shm_received, 1u);
  for (auto x : {fd, probe, unsealed, good, rewriting})
    ::close(x);
}

} // namespace
