// An attacker on the data channel (data_plane_fixture.hpp): a guessed
// proof, another node's proof, a recorded bind replayed, a low-order key,
// a session that ended or was replaced, thousands of malformed binds, an
// oversize announce, a transfer cut short or corrupted, a broken snapshot
// header frame.

#include "data_plane_fixture.hpp"

namespace {

// The fixture's namespace also brings its using-declarations (chrono
// literals, data_plane, secret_1, clock_type).
using namespace dice::test::plane;

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

} // namespace
