// The data plane over real loopback sockets, in one process: bytes between
// two planes bound by a ticket, and an attacker on the data channel (no
// ticket, someone else's ticket, a replayed ticket, an oversize announce, a
// transfer cut short or corrupted). Ephemeral ports; every wait has a
// deadline.

#include "dice/auth.hpp"
#include "dice/log.hpp"
#include "dice/messages/snapshot_chunk.hpp"
#include "dice/net/data_plane.hpp"
#include "dice/net/data_wire.hpp"
#include "dice/net/dialer.hpp"
#include "dice/net/listener.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::net::channel;
using dice::net::data_plane;
using clock_type = dice::net::deadline_clock;

const std::string secret = "0123456789abcdef0123456789abcdef";

struct config : caf::actor_system_config {
  config() {
    dice::add_message_types(*this);
  }
};

dice::shared_bytes pattern(std::size_t n, std::uint8_t seed) {
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

outcome wait_closed(int fd, std::chrono::milliseconds within) {
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
  }
  return r;
}

class DataPlane : public ::testing::Test {
 protected:
  void SetUp() override {
    dice::net::data_plane_config c1;
    c1.node = 1;
    c1.secret = secret;
    c1.io_timeout = 5s;
    c1.max_transfer_bytes = 4 << 20;
    c1.max_peer_bytes = 8 << 20;
    // Bytes on the socket here; the same-host test turns the shortcut on.
    c1.same_host = false;
    acceptor = data_plane::make(sys, c1);
    auto c2 = c1;
    c2.node = 2;
    dialer = data_plane::make(sys, c2);
    auto dp = acceptor;
    auto ln = dice::net::listener::open(
      dice::net::listener_config{1, "127.0.0.1", 0, secret},
      [dp](int fd, channel ch, const std::string& peer) {
        if (ch == channel::data)
          dp->accept(fd, peer);
        else
          ::close(fd);
      });
    ASSERT_TRUE(ln) << caf::to_string(ln.error());
    listener = std::move(*ln);
    listener->start();
    port = listener->port();
  }

  void TearDown() override {
    listener->stop();
    dialer->stop();
    acceptor->stop();
  }

  // Connects as node `node` would, up to the bind frame.
  int dial_data(const std::string& key = secret) {
    auto fd = dice::net::dial_channel(key, "127.0.0.1", port, channel::data,
                                      clock_type::now() + 2s);
    return fd ? *fd : -1;
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

  config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<data_plane> acceptor;
  std::shared_ptr<data_plane> dialer;
  std::unique_ptr<dice::net::listener> listener;
  std::uint16_t port = 0;
};

TEST_F(DataPlane, BytesArriveWholeInBothDirections) {
  auto before = dice::net::data_stats();
  dialer->dial(1, "127.0.0.1", port, acceptor->issue_ticket(2));
  ASSERT_TRUE(dialer->wait_sendable(1, 5s));
  ASSERT_TRUE(acceptor->wait_sendable(2, 5s));
  auto x = pattern(3 << 20, 7);
  auto y = pattern(1 << 20, 9);
  auto id_x = dialer->send(1, std::make_shared<dice::net::data_item>(x));
  auto id_y = acceptor->send(2, std::make_shared<dice::net::data_item>(y));
  ASSERT_TRUE(id_x && id_y);
  auto got_x = take(*acceptor, 2, *id_x);
  auto got_y = take(*dialer, 1, *id_y);
  ASSERT_TRUE(got_x) << caf::to_string(got_x.error());
  ASSERT_TRUE(got_y) << caf::to_string(got_y.error());
  ASSERT_EQ(got_x->size(), x.size());
  EXPECT_EQ(std::memcmp(got_x->data(), x.data(), x.size()), 0);
  ASSERT_EQ(got_y->size(), y.size());
  EXPECT_EQ(std::memcmp(got_y->data(), y.data(), y.size()), 0);
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.transfers_received - before.transfers_received, 2u);
  EXPECT_EQ(after.refused, before.refused);
  // A claim for a transfer that was already taken fails at once.
  EXPECT_FALSE(take(*acceptor, 2, *id_x));
}

TEST_F(DataPlane, SameHostBytesGoThroughOneSealedSegment) {
  acceptor->set_same_host(true);
  dialer->set_same_host(true);
  dialer->dial(1, "127.0.0.1", port, acceptor->issue_ticket(2));
  ASSERT_TRUE(dialer->wait_same_host(1, 5s));
  ASSERT_TRUE(acceptor->wait_same_host(2, 5s));
  auto before = dice::net::data_stats();
  auto x = pattern(3 << 20, 5);
  auto id = dialer->send(1, std::make_shared<dice::net::data_item>(x));
  ASSERT_TRUE(id);
  auto got = take(*acceptor, 2, *id);
  ASSERT_TRUE(got) << caf::to_string(got.error());
  ASSERT_EQ(got->size(), x.size());
  EXPECT_EQ(std::memcmp(got->data(), x.data(), x.size()), 0);
  // Reclaimed on receipt: the receiver released it, the sender closed it.
  EXPECT_TRUE(dialer->wait_released(1, 5s));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.shm_sent - before.shm_sent, 1u);
  EXPECT_EQ(after.shm_received - before.shm_received, 1u);
  EXPECT_EQ(after.bytes_sent, before.bytes_sent) << "body bytes on a socket";
  EXPECT_EQ(after.segments_open, 0u);
}

TEST_F(DataPlane, AStrangerWithoutAValidTicketGetsNothing) {
  auto before = dice::net::data_stats();
  auto issued = acceptor->issue_ticket(2);
  // 1: knows the secret (passes the preamble), guesses a ticket.
  // 2: presents node 2's ticket as node 3.
  // 3: a ticket that was already used for this direction.
  // 4: a malformed bind.
  std::vector<std::string> binds{
    dice::net::encode_bind({dice::net::data_dialer_writes, 2,
                            dice::random_nonce(dice::net::data_ticket_size)}),
    dice::net::encode_bind({dice::net::data_dialer_writes, 3, issued}),
    std::string{},
    std::string(dice::net::data_bind_size, 'x'),
  };
  {
    // The genuine use of the ticket that attempt 3 replays.
    auto fd = dial_data();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_bytes(
      fd, dice::net::encode_bind({dice::net::data_dialer_writes, 2, issued})));
    auto ack = dice::net::recv_exactly(fd, dice::net::data_ack_size,
                                       clock_type::now() + 2s);
    ASSERT_TRUE(ack) << caf::to_string(ack.error());
    binds[2] = dice::net::encode_bind(
      {dice::net::data_dialer_writes, 2, issued});
    ::close(fd);
  }
  for (std::size_t i = 0; i < binds.size(); ++i) {
    auto fd = dial_data();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_bytes(fd, binds[i]));
    auto r = wait_closed(fd, 3000ms);
    EXPECT_TRUE(r.closed) << "attempt " << i + 1;
    EXPECT_EQ(r.bytes, 0u) << "attempt " << i + 1;
    ::close(fd);
  }
  EXPECT_EQ(dice::net::data_stats().refused - before.refused, binds.size());
  // Without the secret, the preamble already refuses the data channel.
  EXPECT_LT(dial_data("ffffffffffffffffffffffffffffffff"), 0);
}

// An insider of the cluster with a valid ticket (as a broken or hostile
// peer would have): the acceptor reads what it announces.
class DataPlaneFrames : public DataPlane {
 protected:
  int bound_writer() {
    auto fd = dial_data();
    if (fd < 0)
      return -1;
    auto bind = dice::net::encode_bind(
      {dice::net::data_dialer_writes, 2, acceptor->issue_ticket(2)});
    auto ack = send_bytes(fd, bind)
      ? dice::net::recv_exactly(fd, dice::net::data_ack_size,
                                clock_type::now() + 2s)
      : caf::expected<std::string>{caf::error{}};
    if (!ack) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  static std::string header(std::uint64_t id, std::uint64_t size,
                            std::uint64_t sum) {
    auto h = dice::net::encode_header({id, size, sum});
    return std::string{h.data(), h.size()};
  }
};

TEST_F(DataPlaneFrames, AnOversizeAnnounceClosesTheConnection) {
  auto before = dice::net::data_stats();
  auto fd = bound_writer();
  ASSERT_GE(fd, 0);
  // 1 GiB announced to a plane that takes 4 MiB per transfer.
  ASSERT_TRUE(send_bytes(fd, header(1, std::uint64_t{1} << 30, 0)));
  auto r = wait_closed(fd, 3000ms);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_EQ(dice::net::data_stats().oversize - before.oversize, 1u);
  ::close(fd);
  // Nothing of it is waiting to be claimed.
  EXPECT_FALSE(take(*acceptor, 2, 1));
}

TEST_F(DataPlaneFrames, ATornTransferIsDroppedWhole) {
  auto before = dice::net::data_stats();
  auto body = pattern(2 << 20, 3);
  auto sum = dice::checksum64(body.data(), body.size());
  std::string half(reinterpret_cast<const char*>(body.data()), body.size() / 2);
  // Cut in the middle of the body (a sender killed mid-transfer).
  auto fd = bound_writer();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_bytes(fd, header(1, body.size(), sum) + half));
  ::close(fd);
  auto got = take(*acceptor, 2, 1);
  EXPECT_FALSE(got);
  // Whole, but corrupted on the way (checksum mismatch).
  fd = bound_writer();
  ASSERT_GE(fd, 0);
  std::string all(reinterpret_cast<const char*>(body.data()), body.size());
  all[12345] ^= 1;
  ASSERT_TRUE(send_bytes(fd, header(1, body.size(), sum) + all));
  auto r = wait_closed(fd, 3000ms);
  EXPECT_TRUE(r.closed);
  ::close(fd);
  EXPECT_FALSE(take(*acceptor, 2, 1));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.torn - before.torn, 2u);
  EXPECT_EQ(after.transfers_received, before.transfers_received);
}

TEST_F(DataPlane, ClaimsFailWhenThePeerIsLost) {
  dialer->dial(1, "127.0.0.1", port, acceptor->issue_ticket(2));
  ASSERT_TRUE(dialer->wait_sendable(1, 5s));
  ASSERT_TRUE(acceptor->wait_sendable(2, 5s));
  // The claim for a transfer that will never come waits, then fails when
  // the peer is lost (long before the io timeout).
  caf::scoped_actor self{sys};
  auto t0 = clock_type::now();
  auto claim = self->request(acceptor->inbox(), 10s,
                             dice::net::data_take_atom::value, std::uint32_t{2},
                             std::uint64_t{1000});
  acceptor->drop_peer(2);
  bool failed = false;
  claim.receive([&](dice::shared_bytes&) {},
                [&](caf::error&) {
                  failed = true;
                });
  EXPECT_TRUE(failed);
  EXPECT_LT(clock_type::now() - t0, 4s);
}

} // namespace
