// Hostile bytes for every decoder that sees input from peers or files:
// Boost payloads (counts and lengths that would allocate gigabytes, bad
// bools, every truncation), CAF deserialization of each dice message, model
// snapshots and node options. Each must be refused with an error and a
// counter, never by a crash or a huge allocation.

#include "dice/core/errc.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/peer_hello.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/runtime/node.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace {

using dice::errc;
using dice::trust_event;

struct item {
  std::string name;
  std::vector<float> obs;
  bool done = false;
};

} // namespace

namespace boost::serialization {

template <class Archive>
void serialize(Archive& ar, item& x, const unsigned int) {
  ar& x.name& x.obs& x.done;
}

} // namespace boost::serialization

namespace {

std::vector<std::uint8_t> bytes_of(const dice::payload& x) {
  return {x.bytes.data(), x.bytes.data() + x.bytes.size()};
}

dice::payload with(const dice::payload& x, std::vector<std::uint8_t> bytes) {
  auto y = x;
  y.bytes = dice::shared_bytes{std::move(bytes)};
  return y;
}

void put_u64(std::vector<std::uint8_t>& buf, std::size_t at, std::uint64_t v) {
  ASSERT_LE(at + 8, buf.size());
  std::memcpy(buf.data() + at, &v, 8);
}

// Decodes and returns the error; checks the rejection counter moved.
template <class T>
caf::error rejected(const dice::payload& x) {
  auto before = dice::counter(trust_event::payload_rejected);
  auto res = dice::unpack<T>(x);
  if (res)
    return caf::error{};
  EXPECT_EQ(dice::counter(trust_event::payload_rejected), before + 1);
  return res.error();
}

TEST(HostilePayload, RoundTripStillWorks) {
  std::vector<item> xs{{"a", {1, 2, 3}, true}, {"", {}, false}};
  auto p = dice::pack(xs);
  auto ys = dice::unpack<item>(p);
  ASSERT_TRUE(ys) << dice::render(ys.error());
  ASSERT_EQ(ys->size(), 2u);
  EXPECT_EQ((*ys)[0].name, "a");
  EXPECT_EQ((*ys)[0].obs, (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE((*ys)[0].done);
}

TEST(HostilePayload, HugeVectorCountIsRefusedBeforeAllocating) {
  // vector<float>: [header][u64 count][floats]; count sits 8 bytes before
  // the 3 floats at the end.
  auto p = dice::pack(std::vector<float>{1, 2, 3});
  auto buf = bytes_of(p);
  put_u64(buf, buf.size() - 12 - 8, std::uint64_t{1} << 40);
  auto t0 = std::chrono::steady_clock::now();
  auto err = rejected<float>(with(p, buf));
  EXPECT_TRUE(dice::is(err, errc::malformed_input)) << dice::render(err);
  // Refused by the count check, not by a failed allocation.
  EXPECT_NE(dice::render(err).find("remaining input"), std::string::npos)
    << dice::render(err);
  // Allocating and zeroing 4 TiB (or even 4 GiB) would take far longer.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds{1});
}

TEST(HostilePayload, HugeStringLengthIsRefused) {
  auto p = dice::pack(std::vector<std::string>{"abc"});
  auto buf = bytes_of(p);
  put_u64(buf, buf.size() - 3 - 8, std::uint64_t{3} << 30);
  auto err = rejected<std::string>(with(p, buf));
  EXPECT_TRUE(dice::is(err, errc::malformed_input)) << dice::render(err);
  EXPECT_NE(dice::render(err).find("remaining input"), std::string::npos)
    << dice::render(err);
}

TEST(HostilePayload, BadBoolIsRefused) {
  auto p = dice::pack(std::vector<item>{{"", {}, true}});
  auto buf = bytes_of(p);
  ASSERT_EQ(buf.back(), 1);
  buf.back() = 7;
  EXPECT_TRUE(dice::is(rejected<item>(with(p, buf)), errc::malformed_input));
}

TEST(HostilePayload, EveryTruncationIsRefused) {
  auto p = dice::pack(std::vector<item>{{"name", {1, 2}, true}, {"x", {3}, 0}});
  auto buf = bytes_of(p);
  for (std::size_t n = 1; n < buf.size(); ++n) {
    std::vector<std::uint8_t> cut(buf.begin(), buf.begin() + n);
    auto err = rejected<item>(with(p, cut));
    EXPECT_TRUE(dice::is(err, errc::malformed_input)) << "prefix " << n;
  }
}

TEST(HostilePayload, ClaimedCountBeyondTheBytesIsRefused) {
  auto p = dice::pack(std::vector<float>{1});
  p.count = 1'000'000'000;
  auto err = rejected<float>(p);
  EXPECT_TRUE(dice::is(err, errc::malformed_input));
  p.count = 2; // plausible, but not what the archive holds
  EXPECT_TRUE(dice::is(rejected<float>(p), errc::malformed_input));
}

TEST(HostilePayload, MistypedPayloadIsRefused) {
  // Floats read as items: the layout does not fit.
  auto p = dice::pack(std::vector<float>{1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(dice::is(rejected<item>(p), errc::malformed_input));
}

// -- CAF deserialization of dice messages ------------------------------------

struct SystemFixture : ::testing::Test {
  struct config : caf::actor_system_config {
    config() {
      dice::add_message_types(*this);
    }
  };
  config cfg;
  caf::actor_system sys{cfg};

  template <class T>
  std::vector<char> serialize(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    EXPECT_FALSE(sink(x));
    return buf;
  }

  template <class T>
  caf::error deserialize(const std::vector<char>& buf, T& x) {
    caf::binary_deserializer source{sys, buf};
    return source(x);
  }
};

dice::context_delta sample_delta() {
  dice::context_delta d;
  d.sender = 3;
  d.incarnation = 77;
  d.seq = 9;
  d.env_step = 10;
  d.trajectories.push_back(dice::pack(std::vector<float>{1, 2, 3}, 3, 1));
  d.trajectory_end_idx = {2};
  d.has_trajectory_end_idx = true;
  return d;
}

TEST_F(SystemFixture, TruncatedMessagesFailCleanly) {
  auto buf = serialize(sample_delta());
  for (std::size_t n = 0; n < buf.size(); ++n) {
    std::vector<char> cut(buf.begin(), buf.begin() + n);
    dice::context_delta d;
    EXPECT_TRUE(deserialize(cut, d)) << "prefix " << n;
  }
  dice::context_delta d;
  EXPECT_FALSE(deserialize(buf, d));
  EXPECT_EQ(d, sample_delta());
}

TEST_F(SystemFixture, OversizeByteLengthIsRefused) {
  auto buf = serialize(sample_delta());
  // Find the payload's byte-length varint ("12 bytes" of floats + header)
  // by corrupting every byte in turn: no corruption may crash or allocate
  // without bound; most must fail.
  std::size_t failures = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    auto bad = buf;
    bad[i] = static_cast<char>(0xff);
    dice::context_delta d;
    if (deserialize(bad, d))
      ++failures;
  }
  EXPECT_GT(failures, 0u);
}

TEST_F(SystemFixture, TruncatedPeerHelloIsRefused) {
  dice::peer_hello h;
  h.node = 4;
  h.topics = {"a", "b"};
  h.finished.push_back(dice::finish{4, "max_step", false});
  h.proof = std::string(64, 'f');
  auto buf = serialize(h);
  // The hello carries no backlog since protocol v3 (it follows as ordinary
  // forwards): every strict prefix must fail to decode.
  for (std::size_t n = 0; n < buf.size(); ++n) {
    std::vector<char> cut(buf.begin(), buf.begin() + n);
    dice::peer_hello y;
    EXPECT_TRUE(deserialize(cut, y)) << "prefix " << n;
  }
  dice::peer_hello y;
  ASSERT_FALSE(deserialize(buf, y));
  EXPECT_EQ(y.node, 4u);
  EXPECT_EQ(y.topics, h.topics);
  EXPECT_EQ(y.proof, h.proof);
}

// -- snapshots ----------------------------------------------------------------

TEST(HostileSnapshot, InconsistentIndexIsRefusedAndCounted) {
  dice::snapshot_builder b;
  float w[4] = {1, 2, 3, 4};
  b.add("w", dice::dtype::float32, {2, 2}, w, sizeof(w));
  auto s = b.build(1, 1, 1, 0);
  EXPECT_FALSE(dice::validate(s));
  auto before = dice::counter(trust_event::snapshot_rejected);
  auto bad = s;
  bad.index[0].shape = {1 << 30, 1 << 30};
  EXPECT_TRUE(dice::is(dice::validate(bad), errc::malformed_input));
  bad = s;
  bad.index[0].offset = 1u << 31;
  EXPECT_TRUE(dice::is(dice::validate(bad), errc::malformed_input));
  bad = s;
  bad.index[0].type = static_cast<dice::dtype>(200);
  EXPECT_TRUE(dice::is(dice::validate(bad), errc::malformed_input));
  bad = s;
  bad.index.push_back(bad.index[0]);
  EXPECT_TRUE(dice::is(dice::validate(bad), errc::malformed_input));
  EXPECT_EQ(dice::counter(trust_event::snapshot_rejected), before + 4);
}

// -- node options
// ---------------------------------------------------------------

TEST(HostileConfig, BadAddressesAndHostListsAreRefused) {
  for (auto str : {"", ":1", "h:", "h:0", "h:65536", "h:99999999999999999999",
                   "h:-1", "h:1x"})
    EXPECT_FALSE(dice::parse_endpoint(str)) << str;
  EXPECT_FALSE(dice::expand_slurm_hosts("n[1-"));
  EXPECT_FALSE(dice::expand_slurm_hosts("n[9-1]"));
  // A range that would expand to billions of names is refused.
  EXPECT_FALSE(dice::expand_slurm_hosts("n[0-999999999]"));
  EXPECT_FALSE(dice::expand_slurm_tasks("2(x999999999)"));
}

} // namespace
