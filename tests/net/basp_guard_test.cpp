// dice's guard in front of CAF's BASP broker (net/basp_guard.hpp), frame by
// frame: genuine headers that CAF itself serialized pass, the frames CAF
// 0.17.6 crashes or over-allocates on do not.

#include "dice/core/errc.hpp"
#include "dice/runtime/node_config.hpp"
#include "net/basp_guard.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/io/basp/header.hpp"

#include "support/raw_socket.hpp"
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using caf::io::basp::header;
using caf::io::basp::message_type;
using dice::net::basp_guard;

/// The bytes CAF writes for `hdr`.
std::vector<char> serialized(header hdr) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  EXPECT_FALSE(sink(hdr));
  return buf;
}

TEST(BaspGuard, HeadersCafWritesPassAndTheirPayloadsFollow) {
  basp_guard g{1 << 20};
  auto check = [&](header h) {
    auto bytes = serialized(h);
    EXPECT_EQ(bytes.size(), caf::io::basp::header_size);
    EXPECT_EQ(g.check(bytes.data(), bytes.size()), "");
    if (h.payload_len > 0) {
      std::string payload(h.payload_len, 'x');
      EXPECT_EQ(g.check(payload.data(), payload.size()), "");
    }
  };
  check({message_type::server_handshake, 0, 60, 3, 0, 0});
  check({message_type::client_handshake, 0, 40, 0, 0, 0});
  check({message_type::direct_message, 0, 100, 0, 7, 9});
  check({message_type::routed_message, 0, 1 << 20, 0, 7, 9});
  check({message_type::monitor_message, 0, 20, 0, 0, 5});
  check({message_type::down_message, 0, 30, 0, 5, 0});
  check({message_type::heartbeat, 0, 0, 0, 0, 0});
  EXPECT_EQ(g.frames(), 7u);
}

TEST(BaspGuard, HandshakesWithoutAPayloadAreRefused) {
  for (auto op :
       {message_type::server_handshake, message_type::client_handshake}) {
    basp_guard g;
    auto bytes = serialized({op, 0, 0, 1, 0, 0});
    EXPECT_EQ(g.check(bytes.data(), bytes.size()),
              "a handshake without a payload");
  }
  // The test's raw crash frame is the same refusal.
  basp_guard g;
  auto crash = dice::test::basp_crash_frame();
  EXPECT_NE(g.check(crash.data(), crash.size()), "");
}

TEST(BaspGuard, AnnouncesAboveTheBoundAreRefusedAtTheBoundTheyPass) {
  basp_guard g{1000};
  auto at = serialized({message_type::direct_message, 0, 1000, 0, 0, 9});
  EXPECT_EQ(g.check(at.data(), at.size()), "");
  std::string payload(1000, 'x');
  EXPECT_EQ(g.check(payload.data(), payload.size()), "");
  auto above = serialized({message_type::direct_message, 0, 1001, 0, 0, 9});
  EXPECT_NE(g.check(above.data(), above.size()).find("1001 bytes announced"),
            std::string::npos);
  basp_guard d; // the default bound: 256 MiB
  auto giant = dice::test::basp_giant_frame();
  EXPECT_NE(d.check(giant.data(), giant.size()), "");
}

TEST(BaspGuard, MalformedHeadersAreRefused) {
  auto refused = [](header h) {
    basp_guard g;
    auto bytes = serialized(h);
    return !g.check(bytes.data(), bytes.size()).empty();
  };
  EXPECT_TRUE(refused({static_cast<message_type>(7), 0, 0, 0, 0, 0}));
  EXPECT_TRUE(refused({static_cast<message_type>(0xFF), 0, 8, 0, 0, 0}));
  EXPECT_TRUE(refused({message_type::direct_message, 0, 0, 0, 0, 9}));
  EXPECT_TRUE(refused({message_type::direct_message, 0, 8, 0, 0, 0}));
  EXPECT_TRUE(refused({message_type::heartbeat, 0, 8, 0, 0, 0}));
  EXPECT_TRUE(refused({message_type::down_message, 0, 0, 0, 5, 0}));
  // A header of the wrong size (CAF always asks for exactly 32 bytes).
  basp_guard g;
  std::string short_header(31, '\0');
  EXPECT_NE(g.check(short_header.data(), short_header.size()), "");
}

TEST(BaspGuard, APayloadOfAnotherLengthThanAnnouncedIsRefused) {
  basp_guard g;
  auto h = serialized({message_type::direct_message, 0, 100, 0, 0, 9});
  ASSERT_EQ(g.check(h.data(), h.size()), "");
  std::string payload(99, 'x');
  EXPECT_NE(g.check(payload.data(), payload.size()), "");
}

TEST(BaspGuard, TheBoundIsConfiguredWithinItsLimits) {
  dice::node_system_config cfg;
  auto nc = dice::make_node_config(cfg);
  ASSERT_TRUE(nc) << caf::to_string(nc.error());
  EXPECT_EQ(nc->max_basp_payload, dice::net::default_max_basp_payload);
  // Below 16 MiB a node could not take the 8 MB snapshot chunks it sends.
  cfg.max_basp_payload = std::size_t{1} << 20;
  auto small = dice::make_node_config(cfg);
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error(), dice::errc::invalid_config);
  cfg.max_basp_payload = std::size_t{8} << 30;
  EXPECT_FALSE(dice::make_node_config(cfg));
  cfg.max_basp_payload = std::size_t{64} << 20;
  auto ok = dice::make_node_config(cfg);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->max_basp_payload, std::uint32_t{64} << 20);
}

} // namespace
