// The data plane's bytes between two planes bound to a control session:
// whole in both directions, with the checksum the reader verified, same
// host through recycled segments, from several threads at once, and claims
// that wait for the bytes or fail when the peer is lost
// (data_plane_fixture.hpp has the setup).

#include "data_plane_fixture.hpp"

namespace {

// The fixture's namespace also brings its using-declarations (chrono
// literals, data_plane, secret_1, clock_type).
using namespace dice::test::plane;

TEST_F(DataPlane, BytesArriveWholeInBothDirections) {
  auto before = dice::net::data_stats();
  std::uint64_t id_x = 0;
  bytes_both_ways(&id_x);
  if (HasFatalFailure())
    return;
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.transfers_received - before.transfers_received, 2u);
  EXPECT_EQ(after.refused, before.refused);
  // A claim for a transfer that was already taken fails at once.
  EXPECT_FALSE(take(*acceptor, 2, id_x));
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

} // namespace
