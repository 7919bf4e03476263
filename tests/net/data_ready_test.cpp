// The router's side of the data plane's inbox over real loopback sockets:
// bytes that arrived before their reference are taken at once
// (data_plane::take_ready, no request to the inbox), and claims for bytes
// still on their way share one timer and still time out on their own
// deadlines. Ephemeral ports; every wait has a deadline.

#include "dice/core/errc.hpp"
#include "dice/type_ids.hpp"
#include "net/data_auth.hpp"
#include "net/data_plane.hpp"
#include "net/dialer.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include "support/data_listener.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace dice::test::data_ready {

using namespace std::chrono_literals;
using net::data_plane;
using clock_type = net::deadline_clock;

struct system_config : caf::actor_system_config {
  system_config() {
    dice::add_message_types(*this);
  }
};

shared_bytes bytes_of(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> xs(n);
  for (std::size_t i = 0; i < n; ++i)
    xs[i] = static_cast<std::uint8_t>(i * 7 + seed);
  return shared_bytes{std::move(xs)};
}

class DataReady : public ::testing::Test {
 protected:
  // Node 2 dials node 1; claims wait at most `io_timeout`; `same_host`:
  // snapshots go through memfd segments.
  void start(caf::timespan io_timeout, bool same_host = false) {
    net::data_plane_config c1;
    c1.node = 1;
    c1.secret = secret_1;
    c1.io_timeout = io_timeout;
    c1.same_host = same_host;
    acceptor = data_plane::make(sys, c1);
    auto c2 = c1;
    c2.node = 2;
    dialer = data_plane::make(sys, c2);
    auto ln = open_data_listener(acceptor, secret_1);
    ASSERT_TRUE(ln) << caf::to_string(ln.error());
    listener = std::move(*ln);
    auto mine = net::data_offer::make();
    auto theirs = acceptor->accept_session(2, mine->pub());
    dialer->dial(1, "127.0.0.1", listener->port(), mine, theirs);
    ASSERT_TRUE(dialer->wait_sendable(1, 5s));
    if (same_host) {
      ASSERT_TRUE(dialer->wait_same_host(1, 5s));
    }
  }

  void TearDown() override {
    if (listener)
      listener->stop();
    if (dialer)
      dialer->stop();
    if (acceptor)
      acceptor->stop();
  }

  // The bytes of transfer `id`, once they are there (5 s at most).
  std::optional<shared_bytes> ready(std::uint64_t id) {
    if (!acceptor->wait_ready(2, id, 5s))
      return std::nullopt;
    return acceptor->take_ready(2, id);
  }

  // The claim the router makes for bytes that are not there yet.
  caf::expected<shared_bytes> claim(std::uint64_t id) {
    caf::scoped_actor self{sys};
    caf::expected<shared_bytes> result{caf::error{}};
    self
      ->request(acceptor->inbox(), 10s, net::data_take_atom::value,
                std::uint32_t{2}, id)
      .receive(
        [&](shared_bytes& x) {
          result = std::move(x);
        },
        [&](caf::error& err) {
          result = std::move(err);
        });
    return result;
  }

  system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<data_plane> acceptor;
  std::shared_ptr<data_plane> dialer;
  std::unique_ptr<net::listener> listener;
};

TEST_F(DataReady, BytesThatArrivedAreTakenOnceWithoutAClaim) {
  start(5s);
  auto x = bytes_of(1 << 20, 3);
  auto id = dialer->send(1, std::make_shared<net::data_item>(x));
  ASSERT_TRUE(id);
  // Nothing is there before the bytes are (the router then claims).
  EXPECT_FALSE(acceptor->take_ready(2, *id + 1));
  auto got = ready(*id);
  ASSERT_TRUE(got) << "the bytes never became ready";
  ASSERT_EQ(got->size(), x.size());
  EXPECT_EQ(std::memcmp(got->data(), x.data(), x.size()), 0);
  // Taken: neither a second take nor a claim gets them again (the claim
  // fails at once instead of waiting for bytes that already came).
  EXPECT_FALSE(acceptor->take_ready(2, *id));
  auto again = claim(*id);
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), errc::unreachable)) << render(again.error());
}

// Claims for bytes that never come, the second made 150 ms after the
// first: each fails with the inbox's timeout (errc::timeout), never before
// its own deadline. When the shared timer fires for the first, the second
// is not due yet, so the timer must be armed again for it; without that it
// would wait for the requester's 10 s and end with CAF's request_timeout.
// A third claim, made once the timer is idle, arms it anew.
TEST_F(DataReady, ClaimsForBytesThatNeverComeTimeOutOnTheirOwnDeadlines) {
  start(400ms);
  caf::scoped_actor self{sys};
  auto request = [&](std::uint64_t id) {
    return self->request(acceptor->inbox(), 10s, net::data_take_atom::value,
                         std::uint32_t{2}, id);
  };
  auto outcome = [&](auto& handle) {
    std::optional<caf::error> out;
    handle.receive(
      [&](shared_bytes&) {
        ADD_FAILURE() << "bytes for a transfer that was never sent";
      },
      [&](caf::error& err) {
        out = std::move(err);
      });
    return out;
  };
  auto t0 = clock_type::now();
  auto first = request(1000);
  // Spaces the claims (the outcome does not depend on how long it took).
  std::this_thread::sleep_for(150ms);
  auto t1 = clock_type::now();
  auto second = request(1001);
  auto err_first = outcome(first);
  auto first_done = clock_type::now();
  auto err_second = outcome(second);
  auto second_done = clock_type::now();
  auto third = request(1002);
  auto err_third = outcome(third);
  ASSERT_TRUE(err_first && err_second && err_third);
  EXPECT_TRUE(is(*err_first, errc::timeout)) << render(*err_first);
  EXPECT_TRUE(is(*err_second, errc::timeout)) << render(*err_second);
  EXPECT_TRUE(is(*err_third, errc::timeout)) << render(*err_third);
  EXPECT_GE(first_done - t0, 400ms);
  EXPECT_GE(second_done - t1, 400ms);
}

// Same host: the receiver's bytes are the sender's segment, mapped, not a
// copy. The sender keeps the segment (and never rewrites it) while any
// handle of those bytes lives, so a second snapshot of the same size goes
// into another segment and the first one's bytes stay as they were; the
// release goes back when the last handle is gone, and the segments are
// pooled again. (Before, the receiver copied the bytes out and released
// the segment on receipt.)
TEST_F(DataReady, SameHostBytesAreTheSendersSegmentUntilTheirLastHandleIsGone) {
  start(5s, true);
  auto before = net::data_stats();
  auto x = bytes_of(1 << 20, 1);
  auto y = bytes_of(1 << 20, 2);
  auto id_x = dialer->send(1, std::make_shared<net::data_item>(x));
  ASSERT_TRUE(id_x);
  auto got_x = ready(*id_x);
  ASSERT_TRUE(got_x) << "the bytes never became ready";
  EXPECT_TRUE(*got_x == x);
  // Held: no release while the receiver has the bytes (a release would
  // come back within milliseconds; it was queued before the delivery).
  EXPECT_FALSE(dialer->wait_released(1, 300ms));
  auto id_y = dialer->send(1, std::make_shared<net::data_item>(y));
  ASSERT_TRUE(id_y);
  auto got_y = ready(*id_y);
  ASSERT_TRUE(got_y) << "the bytes never became ready";
  EXPECT_TRUE(*got_y == y);
  EXPECT_TRUE(*got_x == x) << "the first snapshot's bytes were rewritten";
  EXPECT_EQ(net::data_stats().shm_reused, before.shm_reused);
  got_x.reset();
  got_y.reset();
  EXPECT_TRUE(dialer->wait_released(1, 5s));
  EXPECT_TRUE(net::wait_segments_closed(5s));
  auto after = net::data_stats();
  EXPECT_EQ(after.shm_received - before.shm_received, 2u);
  EXPECT_EQ(after.bytes_sent, before.bytes_sent) << "body bytes on a socket";
  EXPECT_EQ(after.segments_open, 0u);
  EXPECT_EQ(after.segments_pooled, 2u);
}

} // namespace dice::test::data_ready
