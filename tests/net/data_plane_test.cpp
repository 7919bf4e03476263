// The data plane over real loopback sockets, in one process: bytes between
// two planes bound to a control session (net/data_auth.hpp), with and
// without TLS, and an attacker on the data channel (a guessed proof,
// another node's proof, a recorded bind replayed, a session that ended or
// was replaced, plain TCP or a foreign certificate under TLS, an oversize
// announce, a transfer cut short or corrupted). Ephemeral ports; every wait
// has a deadline.

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

namespace {

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

outcome wait_closed(int fd, std::chrono::milliseconds within,
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

TEST_F(DataPlane, BytesArriveWholeInBothDirections) {
  auto before = dice::net::data_stats();
  connect_planes();
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

// Bytes built with their checksum (snapshot_builder) leave without the
// writer hashing them, and the reader's verified checksum stays with what
// it received (a relay forwards them without hashing them again).
TEST_F(DataPlane, BytesArriveWithTheChecksumTheReaderVerified) {
  connect_planes();
  ASSERT_TRUE(dialer->wait_sendable(1, 5s));
  std::vector<std::uint8_t> raw(600'001, 5);
  dice::snapshot_builder b{dice::snapshot_builder::padded(raw.size())};
  b.add("w", dice::dtype::uint8, {600'001}, raw.data(), raw.size());
  auto x = b.build(2, 0, 1, 0);
  ASSERT_TRUE(x.data.known_checksum());
  auto id = dialer->send(1, std::make_shared<dice::net::data_item>(x.data));
  ASSERT_TRUE(id);
  auto got = take(*acceptor, 2, *id);
  ASSERT_TRUE(got) << caf::to_string(got.error());
  EXPECT_TRUE(*got == x.data);
  ASSERT_TRUE(got->known_checksum());
  EXPECT_EQ(*got->known_checksum(), *x.data.known_checksum());
}

// A checksum that came with the bytes is what the trailer carries, and the
// reader still hashes what it reads: bytes whose claimed checksum is wrong
// (a bug in whoever built them) are torn, never delivered.
TEST_F(DataPlane, BytesWithAWrongBuiltInChecksumAreTornNotDelivered) {
  auto before = dice::net::data_stats();
  connect_planes();
  ASSERT_TRUE(dialer->wait_sendable(1, 5s));
  dice::writable_bytes w{100'000};
  std::memset(w.data(), 7, w.size());
  auto right = dice::checksum64(w.data(), w.size());
  dice::shared_bytes wrong{std::move(w), right ^ 1};
  auto id = dialer->send(1, std::make_shared<dice::net::data_item>(wrong));
  ASSERT_TRUE(id);
  EXPECT_FALSE(take(*acceptor, 2, *id));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.torn - before.torn, 1u);
  EXPECT_EQ(after.transfers_received, before.transfers_received);
}

// The dialer registers its receiving side just after it writes the bind,
// so the sender can queue a transfer, and its router send the reference,
// before the receiver's inbox heard of the link: a claim made then waits
// for the bytes (it failed at once with "no data connection from the
// peer", which dropped a 1 MB model at a bench's start under load).
TEST_F(DataPlane, AClaimBeforeTheLinkIsUpWaitsForTheBytes) {
  caf::scoped_actor self{sys};
  auto claim = self->request(dialer->inbox(), 10s,
                             dice::net::data_take_atom::value, std::uint32_t{1},
                             std::uint64_t{1});
  connect_planes();
  ASSERT_TRUE(acceptor->wait_sendable(2, 5s));
  auto x = pattern(1 << 20, 3);
  auto id = acceptor->send(2, std::make_shared<dice::net::data_item>(x));
  ASSERT_TRUE(id);
  ASSERT_EQ(*id, 1u); // the transfer the claim named
  bool delivered = false;
  claim.receive(
    [&](dice::shared_bytes& got) {
      delivered = got.size() == x.size()
        && std::memcmp(got.data(), x.data(), x.size()) == 0;
    },
    [&](caf::error& err) {
      ADD_FAILURE() << caf::to_string(err);
    });
  EXPECT_TRUE(delivered);
}

TEST_F(DataPlane, SameHostBytesGoThroughOneRecycledSegment) {
  acceptor->set_same_host(true);
  dialer->set_same_host(true);
  connect_planes();
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
  // The bytes are the segment, mapped: reclaimed once the receiver drops
  // them (DataReady.SameHostBytesAreTheSendersSegmentUntilTheirLastHandleIsGone
  // holds them longer): released, and pooled by the sender.
  auto copy_x = std::vector<std::uint8_t>(got->data(),
                                          got->data() + got->size());
  got = caf::error{};
  EXPECT_TRUE(dialer->wait_released(1, 5s));
  EXPECT_TRUE(dice::net::wait_segments_closed(5s));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.shm_sent - before.shm_sent, 1u);
  EXPECT_EQ(after.shm_received - before.shm_received, 1u);
  EXPECT_EQ(after.bytes_sent, before.bytes_sent) << "body bytes on a socket";
  EXPECT_EQ(after.segments_open, 0u);
  EXPECT_EQ(after.segments_pooled, 1u);
  // The next snapshot of that size is written into the same pages.
  auto y = pattern(3 << 20, 6);
  id = dialer->send(1, std::make_shared<dice::net::data_item>(y));
  ASSERT_TRUE(id);
  auto got_y = take(*acceptor, 2, *id);
  ASSERT_TRUE(got_y) << caf::to_string(got_y.error());
  ASSERT_EQ(got_y->size(), y.size());
  EXPECT_EQ(std::memcmp(got_y->data(), y.data(), y.size()), 0);
  EXPECT_EQ(std::memcmp(copy_x.data(), x.data(), x.size()), 0);
  got_y = caf::error{};
  EXPECT_TRUE(dialer->wait_released(1, 5s));
  EXPECT_TRUE(dice::net::wait_segments_closed(5s));
  auto last = dice::net::data_stats();
  EXPECT_EQ(last.shm_reused - after.shm_reused, 1u);
  EXPECT_EQ(last.segments_pooled, 1u);
  EXPECT_EQ(last.bytes_sent, before.bytes_sent) << "body bytes on a socket";
}

// A snapshot built by snapshot_builder lives in a memfd already
// (writable_bytes::shareable): a same-host peer maps those very pages, and
// the sender copies nothing into a segment. The block is handed out for
// new bytes only once every peer released it; a block a lost peer may
// still read is closed, never handed out again.
TEST_F(DataPlane, SameHostSnapshotsAreSharedFromThePagesTheyWereBuiltIn) {
  acceptor->set_same_host(true);
  dialer->set_same_host(true);
  connect_planes();
  ASSERT_TRUE(dialer->wait_same_host(1, 5s));
  ASSERT_TRUE(acceptor->wait_same_host(2, 5s));
  constexpr std::size_t n = (1 << 20) + 24; // a last tensor not 64-aligned
  auto src = pattern(n, 9);
  auto build = [&] {
    dice::snapshot_builder b{dice::snapshot_builder::padded(n)};
    b.add("w", dice::dtype::uint8, {static_cast<std::int64_t>(n)}, src.data(),
          n);
    return b.build(2, 0, 1, 0);
  };
  auto inode = [](const dice::shared_bytes& x) {
    struct stat st;
    return ::fstat(x.block()->fd, &st) == 0 ? st.st_ino : ino_t{0};
  };
  auto before = dice::net::data_stats();
  auto x = build();
  ASSERT_NE(x.data.block(), nullptr);
  ASSERT_EQ(x.data.size(), n);
  auto first = inode(x.data);
  auto id = dialer->send(1, std::make_shared<dice::net::data_item>(x.data));
  ASSERT_TRUE(id);
  auto got = take(*acceptor, 2, *id);
  ASSERT_TRUE(got) << caf::to_string(got.error());
  ASSERT_EQ(got->size(), n);
  EXPECT_EQ(std::memcmp(got->data(), src.data(), n), 0);
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.shm_borrowed - before.shm_borrowed, 1u);
  EXPECT_EQ(after.shm_reused, before.shm_reused) << "copied into a segment";
  EXPECT_EQ(after.bytes_sent, before.bytes_sent) << "body bytes on a socket";
  // The same pages, not a copy: a byte changed in the sender's block (only
  // a test writes into frozen bytes) shows in the receiver's.
  auto* mine = x.data.block()->base + dice::detail::shareable_header;
  mine[77] ^= 0xFF;
  EXPECT_EQ(got->data()[77], static_cast<std::uint8_t>(src.data()[77] ^ 0xFF));
  mine[77] ^= 0xFF;
  // Released and dropped: the next snapshot of that size is built in the
  // same memfd, under a new tag, and arrives whole.
  got = caf::error{};
  EXPECT_TRUE(dialer->wait_released(1, 5s));
  x = dice::model_snapshot{};
  EXPECT_TRUE(dice::net::wait_segments_closed(5s));
  auto y = build();
  ASSERT_NE(y.data.block(), nullptr);
  EXPECT_EQ(inode(y.data), first);
  id = dialer->send(1, std::make_shared<dice::net::data_item>(y.data));
  ASSERT_TRUE(id);
  got = take(*acceptor, 2, *id);
  ASSERT_TRUE(got) << caf::to_string(got.error());
  EXPECT_EQ(std::memcmp(got->data(), src.data(), n), 0);
  // The peer is lost while it holds the bytes: that block is never handed
  // out again (it may still read it), so the next snapshot gets another.
  dialer->drop_peer(1);
  y = dice::model_snapshot{};
  EXPECT_TRUE(dice::net::wait_segments_closed(5s));
  auto z = build();
  ASSERT_NE(z.data.block(), nullptr);
  EXPECT_NE(inode(z.data), first);
  EXPECT_EQ(std::memcmp(got->data(), src.data(), n), 0) << "held bytes changed";
}

TEST_F(DataPlane, AStrangerWithoutAProofOfTheSessionGetsNothing) {
  auto before = dice::net::data_stats();
  auto auth_before = dice::counter(dice::trust_event::auth_refused);
  auto h = hello();
  ASSERT_EQ(h.key.size(), 32u);
  // A member of the cluster who saw the hello (both public keys) but not
  // the X25519 secret of either side.
  auto seen = dice::net::data_session_key(secret_1, 1, 2, h.mine->pub(),
                                          h.theirs, dice::random_nonce(32));
  // The genuine bind of direction 0, recorded on the wire.
  std::string recorded;
  {
    std::string binding;
    auto fd = dial_data(secret_1, &binding);
    ASSERT_GE(fd, 0);
    recorded = bind(dice::net::data_dialer_writes, 2, h.key, binding);
    ASSERT_TRUE(send_bytes(fd, recorded));
    auto ack = dice::net::recv_exactly(fd, dice::net::data_ack_size,
                                       clock_type::now() + 2s);
    ASSERT_TRUE(ack) << caf::to_string(ack.error());
    ::close(fd);
  }
  auto flipped = recorded;
  flipped[4] = static_cast<char>(dice::net::data_acceptor_writes);
  // Each attempt passes the preamble (it knows the secret), then:
  std::vector<std::function<std::string(const std::string&)>> attempts{
    // 1: guesses the proof.
    [](const std::string&) {
      return dice::net::encode_bind(
        {dice::net::data_acceptor_writes, 2, dice::random_nonce(32)});
    },
    // 2: node 2's valid proof for this connection, presented as node 3.
    [&](const std::string& b) {
      return bind(dice::net::data_acceptor_writes, 3, h.key, b);
    },
    // 3: replays the recorded bind (its direction is used up).
    [&](const std::string&) {
      return recorded;
    },
    // 4: replays it for the direction not yet bound.
    [&](const std::string&) {
      return flipped;
    },
    // 5: a proof under a key from what the hello showed.
    [&](const std::string& b) {
      return bind(dice::net::data_acceptor_writes, 2, seen, b);
    },
    // 6: a malformed bind.
    [](const std::string&) {
      return std::string(dice::net::data_bind_size, 'x');
    },
  };
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    std::string binding;
    auto fd = dial_data(secret_1, &binding);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_bytes(fd, attempts[i](binding)));
    auto r = wait_closed(fd, 3000ms);
    EXPECT_TRUE(r.closed) << "attempt " << i + 1;
    EXPECT_EQ(r.bytes, 0u) << "attempt " << i + 1;
    ::close(fd);
  }
  EXPECT_EQ(dice::net::data_stats().refused - before.refused, attempts.size());
  EXPECT_GE(dice::counter(dice::trust_event::auth_refused) - auth_before,
            attempts.size() - 1);
  // Without the secret, the preamble already refuses the data channel.
  EXPECT_LT(dial_data("ffffffffffffffffffffffffffffffff"), 0);
  // None of it burned the session: the genuine peer still binds the other
  // direction.
  std::string binding;
  auto fd = dial_data(secret_1, &binding);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
    send_bytes(fd, bind(dice::net::data_acceptor_writes, 2, h.key, binding)));
  auto ack = dice::net::recv_exactly(fd, dice::net::data_ack_size,
                                     clock_type::now() + 2s);
  ASSERT_TRUE(ack) << caf::to_string(ack.error());
  ::close(fd);
}

TEST_F(DataPlane, ALowOrderKeyBindsNothing) {
  // The hello no longer runs the X25519 agreement (the first bind does, off
  // the router's connect path), so an attacher's low-order public key gets
  // an answer; its session must still bind nothing. u = 0 makes the shared
  // secret all zeros, which is what such an attacher would use for K.
  auto before = dice::net::data_stats();
  std::string zero(dice::net::data_key_size, '\0');
  auto theirs = acceptor->accept_session(2, zero);
  ASSERT_EQ(theirs.size(), dice::net::data_key_size);
  auto guessed = dice::net::data_session_key(secret_1, 1, 2, zero, theirs,
                                             zero);
  for (const auto& key : {guessed, std::string{}}) {
    std::string binding;
    auto fd = dial_data(secret_1, &binding);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(
      send_bytes(fd, bind(dice::net::data_dialer_writes, 2, key, binding)));
    auto r = wait_closed(fd, 3000ms);
    EXPECT_TRUE(r.closed);
    EXPECT_EQ(r.bytes, 0u) << "a low-order key bound a data connection";
    ::close(fd);
  }
  EXPECT_EQ(dice::net::data_stats().refused - before.refused, 2u);
  // A malformed key (not 32 bytes) still gets no data plane at all.
  EXPECT_TRUE(acceptor->accept_session(3, "short").empty());
}

TEST_F(DataPlane, ThousandsOfMalformedBindsLogAFewLines) {
  // A secret holder passes the preamble 1,100 times and sends a malformed
  // bind each time: every one is refused and counted; the log gets the
  // first and the 1025th (before: a line each).
  dice::test::log_capture logs;
  auto before = dice::net::data_stats();
  constexpr std::size_t n = 1100;
  for (std::size_t i = 0; i < n; ++i) {
    std::string binding;
    auto fd = dial_data(secret_1, &binding);
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(send_bytes(fd, std::string(dice::net::data_bind_size, 'x')));
    auto r = wait_closed(fd, 3000ms);
    ::close(fd);
    ASSERT_TRUE(r.closed) << i;
  }
  EXPECT_EQ(dice::net::data_stats().refused - before.refused, n);
  // The sampler is process-wide and keyed by the peer's host: when the
  // tests before this one in the same process refused a bind from
  // 127.0.0.1 (AStrangerWithoutAProofOfTheSessionGetsNothing does), the
  // first line is theirs and only the 1025th is this test's.
  auto lines = logs.count("malformed bind frame");
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 2u);
  EXPECT_EQ(logs.count("(1025 such; every 1024th is logged)"), 1u);
}

TEST_F(DataPlane, ASessionBindsNothingOnceItsControlSessionIsGone) {
  auto before = dice::net::data_stats();
  auto try_bind = [&](const std::string& key) {
    std::string binding;
    auto fd = dial_data(secret_1, &binding);
    if (fd < 0)
      return false;
    send_bytes(fd, bind(dice::net::data_dialer_writes, 2, key, binding));
    auto ack = dice::net::recv_exactly(fd, dice::net::data_ack_size,
                                       clock_type::now() + 2s);
    ::close(fd);
    return static_cast<bool>(ack);
  };
  // The control session ends (peer lost) before its data connections bind.
  auto lost = hello();
  acceptor->drop_peer(2);
  EXPECT_FALSE(try_bind(lost.key)) << "bound after its session ended";
  // The peer reconnects (a new hello: a new session); the old session's
  // key binds nothing, the new one does.
  auto old = hello();
  auto fresh = hello();
  EXPECT_FALSE(try_bind(old.key)) << "an older session of node 2 bound";
  EXPECT_TRUE(try_bind(fresh.key));
  EXPECT_EQ(dice::net::data_stats().refused - before.refused, 2u);
}

TEST_F(DataPlane, TheDialerRefusesAnAcceptorWithoutTheSession) {
  // Someone who knows the cluster secret answers at the acceptor's address
  // with an ack it cannot prove: the dialer does not use the connection.
  auto auth_before = dice::counter(dice::trust_event::auth_refused);
  auto fake = dice::net::listener::open(
    dice::net::listener_config{9, "127.0.0.1", 0, secret_1},
    [](dice::unique_fd fd, channel, const std::string&, const std::string&) {
      auto b = dice::net::recv_exactly(fd.get(), dice::net::data_bind_size,
                                       clock_type::now() + 2s);
      if (b)
        dice::net::send_all(fd.get(),
                            dice::net::encode_ack(dice::random_nonce(32)),
                            clock_type::now() + 2s);
    });
  ASSERT_TRUE(fake) << caf::to_string(fake.error());
  (*fake)->start();
  auto mine = data_offer::make();
  auto theirs = data_offer::make();
  dialer->dial(1, "127.0.0.1", (*fake)->port(), mine, theirs->pub());
  EXPECT_FALSE(dialer->wait_sendable(1, 5s));
  EXPECT_GE(dice::counter(dice::trust_event::auth_refused) - auth_before, 1u);
  (*fake)->stop();
}

// An insider of the cluster with a valid session (as a broken or hostile
// peer would have): the acceptor reads what it announces.
class DataPlaneFrames : public DataPlane {
 protected:
  int bound_writer() {
    std::string binding;
    auto fd = dial_data(secret_1, &binding);
    if (fd < 0)
      return -1;
    auto h = hello();
    auto ack = send_bytes(
                 fd, bind(dice::net::data_dialer_writes, 2, h.key, binding))
      ? dice::net::recv_exactly(fd, dice::net::data_ack_size,
                                clock_type::now() + 2s)
      : caf::expected<std::string>{caf::error{}};
    if (!ack) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  static std::string header(std::uint64_t id, std::uint64_t size) {
    auto h = dice::net::encode_header({id, size, 0});
    return std::string{h.data(), h.size()};
  }

  static std::string trailer(std::uint64_t sum) {
    auto t = dice::net::encode_trailer(sum);
    return std::string{t.data(), t.size()};
  }
};

TEST_F(DataPlaneFrames, AnOversizeAnnounceClosesTheConnection) {
  auto before = dice::net::data_stats();
  auto fd = bound_writer();
  ASSERT_GE(fd, 0);
  // 1 GiB announced to a plane that takes 4 MiB per transfer.
  ASSERT_TRUE(send_bytes(fd, header(1, std::uint64_t{1} << 30)));
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
  ASSERT_TRUE(send_bytes(fd, header(1, body.size()) + half));
  ::close(fd);
  auto got = take(*acceptor, 2, 1);
  EXPECT_FALSE(got);
  // Whole, but corrupted on the way (checksum mismatch).
  fd = bound_writer();
  ASSERT_GE(fd, 0);
  std::string all(reinterpret_cast<const char*>(body.data()), body.size());
  all[12345] ^= 1;
  ASSERT_TRUE(send_bytes(fd, header(1, body.size()) + all + trailer(sum)));
  auto r = wait_closed(fd, 3000ms);
  EXPECT_TRUE(r.closed);
  ::close(fd);
  EXPECT_FALSE(take(*acceptor, 2, 1));
  // Whole and intact, but cut before its checksum.
  all[12345] ^= 1;
  fd = bound_writer();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_bytes(fd, header(1, body.size()) + all));
  ::close(fd);
  EXPECT_FALSE(take(*acceptor, 2, 1));
  // A header whose reserved bytes are not 0 is malformed: refused at once
  // (sending the body after it would meet the closed connection).
  auto odd = header(1, body.size());
  odd[31] = 1;
  fd = bound_writer();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_bytes(fd, odd));
  r = wait_closed(fd, 3000ms);
  EXPECT_TRUE(r.closed);
  ::close(fd);
  EXPECT_FALSE(take(*acceptor, 2, 1));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.torn - before.torn, 4u);
  EXPECT_EQ(after.transfers_received, before.transfers_received);
}

TEST_F(DataPlaneFrames, ABrokenSnapshotHeaderFrameClosesTheConnection) {
  auto before = dice::net::data_stats();
  auto body = pattern(300'000, 5);
  std::string all(reinterpret_cast<const char*>(body.data()), body.size());
  auto transfer = header(1, body.size()) + all
    + trailer(dice::checksum64(body.data(), body.size()));
  auto meta = std::string(100, 'x');
  auto frame = [&](std::uint32_t size, std::uint64_t sum) {
    auto f = dice::net::encode_meta_frame({size, 0, sum});
    return std::string{f.data(), f.size()};
  };
  auto sum = dice::checksum64(meta.data(), meta.size());
  auto refused = [&](const std::string& bytes) {
    auto fd = bound_writer();
    if (fd < 0)
      return false;
    auto sent = send_bytes(fd, bytes);
    auto r = wait_closed(fd, 3000ms);
    ::close(fd);
    return sent && r.closed && r.bytes == 0;
  };
  // A header whose checksum does not match its bytes.
  EXPECT_TRUE(refused(frame(100, sum ^ 1) + meta + transfer));
  // A header announcing more than a header may take.
  EXPECT_TRUE(refused(frame(
    static_cast<std::uint32_t>(dice::net::max_data_meta_bytes + 1), sum)));
  // A header followed by something other than its transfer.
  auto probe_ok = dice::net::encode_probe_ok();
  EXPECT_TRUE(refused(frame(100, sum) + meta
                      + std::string{probe_ok.data(), probe_ok.size()}));
  // A header before a relay round's transfer, which carries none.
  auto tagged = dice::net::encode_header({1, body.size(), 7});
  EXPECT_TRUE(refused(frame(100, sum) + meta
                      + std::string{tagged.data(), tagged.size()}));
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.torn - before.torn, 4u);
  EXPECT_EQ(after.transfers_received, before.transfers_received);
  EXPECT_FALSE(take(*acceptor, 2, 1));
}

TEST_F(DataPlane, ClaimsFailWhenThePeerIsLost) {
  connect_planes();
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

// Sends from several threads at once (a router and relays share a link),
// of sizes from 100 B to 3 MiB, more than the receiver's budget holds, so
// later ones queue behind a full socket: every transfer arrives whole and
// none is torn (frames of two sends interleaved would be).
void sends_from_threads(
  data_plane& from,
  const std::function<caf::expected<dice::shared_bytes>(std::uint64_t)>& take) {
  auto before = dice::net::data_stats();
  constexpr int threads = 3;
  constexpr int per_thread = 16;
  const std::size_t sizes[] = {100, 300 << 10, 1536 << 10, 3 << 20};
  std::vector<std::pair<std::uint64_t, dice::shared_bytes>> sent[threads];
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto x = pattern(sizes[(t + i) % 4],
                         static_cast<std::uint8_t>(t * 31 + i));
        if (auto id = from.send(1, std::make_shared<dice::net::data_item>(x)))
          sent[t].emplace_back(*id, std::move(x));
      }
    });
  for (auto& s : senders)
    s.join();
  std::vector<std::pair<std::uint64_t, dice::shared_bytes>> all;
  for (auto& xs : sent)
    all.insert(all.end(), xs.begin(), xs.end());
  ASSERT_EQ(all.size(), std::size_t{threads * per_thread});
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) {
    return a.first < b.first;
  });
  for (auto& [id, x] : all) {
    auto got = take(id);
    ASSERT_TRUE(got) << "transfer " << id << ": "
                     << caf::to_string(got.error());
    ASSERT_EQ(got->size(), x.size());
    EXPECT_EQ(std::memcmp(got->data(), x.data(), x.size()), 0) << id;
  }
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.torn, before.torn);
  EXPECT_EQ(after.transfers_received - before.transfers_received, all.size());
}

TEST_F(DataPlane, SendsFromSeveralThreadsArriveWhole) {
  connect_planes();
  ASSERT_TRUE(dialer->wait_sendable(1, 5s));
  sends_from_threads(*dialer, [&](std::uint64_t id) {
    return take(*acceptor, 2, id);
  });
}

// Sent from the moment the link is up, while the peer's answer to the
// same-host probe may still be on its way: transfers queued as bytes stay
// whole when the link turns same-host (a reference in the middle of one
// would tear the stream), and the later ones go as references.
TEST_F(DataPlane, SendsWhileTheLinkTurnsSameHostArriveWhole) {
  acceptor->set_same_host(true);
  dialer->set_same_host(true);
  auto before = dice::net::data_stats();
  connect_planes();
  ASSERT_TRUE(dialer->wait_sendable(1, 5s));
  auto take_one = [&](std::uint64_t id) {
    return take(*acceptor, 2, id);
  };
  sends_from_threads(*dialer, take_one);
  EXPECT_TRUE(dialer->wait_same_host(1, 5s));
  sends_from_threads(*dialer, take_one);
  EXPECT_GT(dice::net::data_stats().shm_received, before.shm_received);
}

// Both planes with the node's TLS files: data connections run TLS.
class DataPlaneTls : public DataPlane {
 protected:
  dice::tls_files tls() const override {
    return certs();
  }

  // A third plane, node 3, with `files`, that has a session with node 1.
  std::shared_ptr<data_plane> other(dice::tls_files files) {
    dice::net::data_plane_config c;
    c.node = 3;
    c.secret = secret_1;
    c.tls = std::move(files);
    c.same_host = false;
    auto dp = data_plane::make(sys, c);
    auto h = hello(3);
    dp->dial(1, "127.0.0.1", port, h.mine, h.theirs);
    return dp;
  }
};

TEST_F(DataPlaneTls, BytesArriveWholeOverTls) {
  ASSERT_TRUE(acceptor->tls() && dialer->tls());
  auto before = dice::net::data_stats();
  connect_planes();
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
  EXPECT_EQ(after.refused, before.refused);
  EXPECT_EQ(after.torn, before.torn);
}

TEST_F(DataPlaneTls, PlainTcpOnTheDataChannelGetsNothing) {
  auto before = dice::net::data_stats();
  auto h = hello();
  // A valid proof of the session, but in the clear: the acceptor expects
  // a TLS handshake and never reads it as a bind.
  std::string binding;
  auto fd = dial_data(secret_1, &binding);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
    send_bytes(fd, bind(dice::net::data_dialer_writes, 2, h.key, binding)));
  std::string got;
  auto r = wait_closed(fd, 3000ms, &got);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(got.find("DACK"), std::string::npos);
  ::close(fd);
  // A plane without TLS files dials as the real code would.
  auto plain = other({});
  EXPECT_FALSE(plain->wait_sendable(1, 5s));
  plain->stop();
  // The acceptor counts before it closes: the raw attempt and whichever of
  // the plane's two connections failed first are counted by now (its
  // second may still be on the way).
  EXPECT_GE(dice::net::data_stats().refused - before.refused, 2u);
}

TEST_F(DataPlaneTls, AForeignCertificateGetsNothing) {
  auto before = dice::net::data_stats();
  // A certificate the cluster's CA did not sign.
  auto stranger = other(certs("stranger-"));
  ASSERT_TRUE(stranger->tls());
  EXPECT_FALSE(stranger->wait_sendable(1, 5s));
  stranger->stop();
  // The stranger gives up first (it checks the acceptor's certificate);
  // joining the acceptor's threads makes its refusal of the first
  // connection visible.
  acceptor->stop();
  EXPECT_GE(dice::net::data_stats().refused - before.refused, 1u);
  EXPECT_EQ(dice::net::data_stats().links_opened, before.links_opened);
}

} // namespace
