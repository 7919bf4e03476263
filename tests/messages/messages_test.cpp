// Every dice message through CAF's binary serializer, raw and wrapped in a
// caf::message (what BASP puts on the wire), plus the decoding guards for
// hostile or truncated bytes. LibTorch-free. (shared_bytes and the buffers
// under it: shared_bytes_test.cpp.)

#include "dice/core/errc.hpp"
#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/learner_group_hello.hpp"
#include "dice/messages/detail/relay_reference.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/messages/shared_bytes.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"

#include "support/pattern.hpp"
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

// Records the largest single allocation so a test can prove that a hostile
// length is refused before memory is reserved for it.
namespace {
std::atomic<std::size_t> largest_alloc{0};
} // namespace

// noinline: GCC would otherwise see free() on operator new's pointer and warn.
[[gnu::noinline]] void* operator new(std::size_t n) {
  auto prev = largest_alloc.load(std::memory_order_relaxed);
  while (n > prev
         && !largest_alloc.compare_exchange_weak(prev, n,
                                                 std::memory_order_relaxed)) {
    // retry
  }
  if (auto p = std::malloc(n == 0 ? 1 : n))
    return p;
  throw std::bad_alloc{};
}

[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}

[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace dice {

// For the round trip below (the router never compares references).
bool operator==(const relay_reference& x, const relay_reference& y) {
  return x.topic == y.topic && x.sender == y.sender && x.round == y.round
    && x.digest == y.digest && x.upstream == y.upstream
    && x.children == y.children && x.header == y.header;
}

} // namespace dice

namespace {

using dice::model_snapshot;
using dice::payload;
using dice::shared_bytes;

/// An actor system with dice's types registered (the serializers need its
/// type registry), on the test scheduler so no worker threads start.
struct test_config : caf::actor_system_config {
  test_config() {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.verbosity", caf::atom("quiet"));
    dice::add_message_types(*this);
  }
};

using dice::test::pattern;

payload make_payload(std::size_t n, std::uint64_t count, std::uint32_t origin,
                     std::int64_t version) {
  return payload{shared_bytes{pattern(n, origin + 7)}, count, origin, version};
}

model_snapshot small_snapshot() {
  dice::snapshot_builder b;
  auto w = pattern(3 * 4 * 4, 3);
  auto steps = pattern(8, 4);
  b.add("fc.weight", dice::dtype::float32, {3, 4}, w.data(), w.size());
  b.add("bn.num_batches_tracked", dice::dtype::int64, {}, steps.data(),
        steps.size());
  b.add("empty", dice::dtype::uint8, {0, 5}, nullptr, 0);
  return b.build(2, 77, 9, 123456789);
}

class Messages : public ::testing::Test {
 protected:
  test_config cfg;
  caf::actor_system sys{cfg};

  /// Serializes `x` with CAF's binary serializer.
  template <class T>
  std::vector<char> save(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    auto err = sink(x);
    EXPECT_FALSE(err) << sys.render(err);
    return buf;
  }

  /// Deserializes a `T`; every byte must be consumed.
  template <class T>
  caf::expected<T> load(const std::vector<char>& buf) {
    T result;
    caf::binary_deserializer source{sys, buf};
    if (auto err = source(result))
      return err;
    if (source.remaining() != 0)
      return caf::make_error(caf::sec::invalid_argument, "trailing bytes");
    return result;
  }

  /// Serializes `x` as the single element of a caf::message.
  template <class T>
  std::vector<char> save_message(const T& x) {
    auto msg = caf::make_message(x);
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    auto err = sink(msg);
    EXPECT_FALSE(err) << sys.render(err);
    return buf;
  }

  /// Deserializes a caf::message holding exactly one `T`.
  template <class T>
  caf::expected<T> load_message(const std::vector<char>& buf) {
    caf::message msg;
    caf::binary_deserializer source{sys, buf};
    if (auto err = source(msg))
      return err;
    if (source.remaining() != 0)
      return caf::make_error(caf::sec::invalid_argument, "trailing bytes");
    if (!msg.match_elements<T>())
      return caf::make_error(caf::sec::unexpected_message,
                             "got " + to_string(msg));
    return msg.get_as<T>(0);
  }

  /// Checks that `x` survives both round trips unchanged, and that every
  /// truncation of both encodings is refused with an error.
  template <class T>
  void check_round_trip(const T& x) {
    auto raw = save(x);
    auto y = load<T>(raw);
    ASSERT_TRUE(y) << sys.render(y.error());
    EXPECT_TRUE(*y == x);
    auto wrapped = save_message(x);
    auto z = load_message<T>(wrapped);
    ASSERT_TRUE(z) << sys.render(z.error());
    EXPECT_TRUE(*z == x);
    for (std::size_t n = 0; n < raw.size(); ++n) {
      std::vector<char> cut{raw.begin(), raw.begin() + n};
      EXPECT_FALSE(load<T>(cut)) << "raw prefix of " << n << " bytes";
    }
    for (std::size_t n = 0; n < wrapped.size(); ++n) {
      std::vector<char> cut{wrapped.begin(), wrapped.begin() + n};
      EXPECT_FALSE(load_message<T>(cut))
        << "message prefix of " << n << " bytes";
    }
  }
};

// -- round trips --------------------------------------------------------------

TEST_F(Messages, RoleSetRoundTrips) {
  check_round_trip(dice::role_set{});
  check_round_trip(dice::role_set{dice::role::learner});
  check_round_trip(dice::role_set{dice::role::collector, dice::role::evaluator,
                                  dice::role::fetcher});
}

TEST_F(Messages, PayloadRoundTrips) {
  check_round_trip(payload{});
  check_round_trip(make_payload(1, 1, 3, 0));
  check_round_trip(make_payload(1000, 17, 4, 42));
  // Different bytes of the same size must not compare equal after decoding.
  auto a = save(make_payload(64, 1, 1, 1));
  auto b = make_payload(64, 1, 2, 1);
  b.origin = 1;
  auto decoded = load<payload>(a);
  ASSERT_TRUE(decoded);
  EXPECT_FALSE(*decoded == b);
}

TEST_F(Messages, ContextDeltaWithEveryFieldSetRoundTrips) {
  dice::context_delta x;
  x.sender = 5;
  x.incarnation = 1005;
  x.seq = 3;
  x.sender_roles = dice::role_set{dice::role::collector};
  x.env_step = 128;
  x.env_episode = -2;
  x.train_iter = 9;
  x.trajectories = {make_payload(100, 4, 5, 7), make_payload(0, 0, 5, 7),
                    make_payload(33, 1, 6, 8)};
  x.episodes = {make_payload(10, 1, 5, 7)};
  x.trajectory_end_idx = {3, 4, 5};
  x.has_trajectory_end_idx = true;
  x.model_version = 7;
  check_round_trip(x);
}

TEST_F(Messages, ContextDeltaWithUnsetOptionalsRoundTrips) {
  dice::context_delta x;
  x.sender = 1;
  x.seq = 1;
  x.sender_roles = dice::role_set{dice::role::learner};
  x.train_iter = 0; // set, but zero: must stay set
  check_round_trip(x);
  auto y = load<dice::context_delta>(save(x));
  ASSERT_TRUE(y);
  EXPECT_FALSE(y->env_step);
  EXPECT_FALSE(y->env_episode);
  ASSERT_TRUE(y->train_iter);
  EXPECT_EQ(*y->train_iter, 0);
  EXPECT_TRUE(y->trajectories.empty());
  EXPECT_TRUE(y->episodes.empty());
  EXPECT_TRUE(y->trajectory_end_idx.empty());
  // A default delta (nothing set at all) round trips as well.
  check_round_trip(dice::context_delta{});
}

TEST_F(Messages, TensorEntryRoundTrips) {
  check_round_trip(dice::tensor_entry{});
  check_round_trip(
    dice::tensor_entry{"fc1.weight", dice::dtype::bfloat16, {64, 4}, 128, 512});
}

TEST_F(Messages, ModelSnapshotRoundTrips) {
  check_round_trip(model_snapshot{});
  auto x = small_snapshot();
  ASSERT_FALSE(dice::validate(x));
  check_round_trip(x);
}

TEST_F(Messages, StorageRefRoundTrips) {
  check_round_trip(dice::storage_ref{});
  check_round_trip(dice::storage_ref{dice::storage_kind::shm, "/dice-3-17",
                                     "host-a", 4096, 0xDEADBEEFCAFEull, 3});
}

TEST_F(Messages, RelayReferenceRoundTrips) {
  check_round_trip(dice::relay_reference{});
  dice::relay_reference x;
  x.topic = "model";
  x.sender = 0;
  x.round = 7;
  x.digest = std::string(32, '\x5a');
  x.upstream = 3;
  x.children = {7, 8};
  x.header = small_snapshot();
  x.header.data = shared_bytes{};
  check_round_trip(x);
}

TEST_F(Messages, FinishRoundTrips) {
  check_round_trip(dice::finish{});
  check_round_trip(dice::finish{4, "max_step", false});
  check_round_trip(dice::finish{2, "collector 2 failed: env crashed", true});
}

TEST_F(Messages, NodeReportRoundTrips) {
  // node_report has no operator==: compare its JSON rendering.
  dice::node_report x;
  x.node = 3;
  x.roles = dice::role_set{dice::role::learner, dice::role::evaluator};
  x.total_step = 99;
  x.iterations = 100;
  x.env_step = 12800;
  x.env_episode = 64;
  x.train_iter = 100;
  x.model_version = 10;
  x.trajectories_received = 12800;
  x.deltas_received = 200;
  x.models_loaded = 1;
  x.models_sent = 10;
  x.models_dropped = 2;
  x.timeouts = 1;
  x.restarts = 3;
  x.stop_reason = "max_step";
  auto y = load<dice::node_report>(save(x));
  ASSERT_TRUE(y) << sys.render(y.error());
  EXPECT_EQ(dice::to_json(*y), dice::to_json(x));
  auto z = load_message<dice::node_report>(save_message(x));
  ASSERT_TRUE(z) << sys.render(z.error());
  EXPECT_EQ(dice::to_json(*z), dice::to_json(x));
  auto d = load<dice::node_report>(save(dice::node_report{}));
  ASSERT_TRUE(d);
  EXPECT_EQ(dice::to_json(*d), dice::to_json(dice::node_report{}));
}

TEST_F(Messages, LargeSnapshotComesBackByteIdentical) {
  constexpr std::size_t n = 100 * 1000 * 1000;
  auto bytes = pattern(n, 11);
  dice::snapshot_builder b{n};
  b.add("big", dice::dtype::uint8, {static_cast<std::int64_t>(n)}, bytes.data(),
        n);
  auto x = b.build(1, 2, 3, 4);
  ASSERT_EQ(x.data.size(), n);
  {
    auto y = load<model_snapshot>(save(x));
    ASSERT_TRUE(y) << sys.render(y.error());
    ASSERT_EQ(y->data.size(), n);
    EXPECT_FALSE(y->data.same_buffer(x.data));
    EXPECT_EQ(std::memcmp(y->data.data(), bytes.data(), n), 0);
    EXPECT_EQ(y->index, x.index);
    EXPECT_FALSE(dice::validate(*y));
  }
  {
    auto y = load_message<model_snapshot>(save_message(x));
    ASSERT_TRUE(y) << sys.render(y.error());
    ASSERT_EQ(y->data.size(), n);
    EXPECT_EQ(std::memcmp(y->data.data(), bytes.data(), n), 0);
    EXPECT_EQ(y->version, 3);
  }
}

TEST_F(Messages, LengthAboveMaxWireBytesIsRefused) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  std::size_t n = dice::max_wire_bytes + 1;
  ASSERT_FALSE(sink.begin_sequence(n));
  buf.resize(buf.size() + 64, 'x');
  largest_alloc = 0;
  auto x = load<shared_bytes>(buf);
  ASSERT_FALSE(x);
  EXPECT_EQ(x.error(), caf::sec::invalid_argument);
  EXPECT_LT(largest_alloc.load(), std::size_t{1} << 20);
}

TEST_F(Messages, LengthBeyondTheInputIsRefusedBeforeAllocating) {
  // Within the limit, but the frame holds only a few bytes: must not
  // allocate the claimed gigabyte just to find out.
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  std::size_t n = dice::max_wire_bytes / 2;
  ASSERT_FALSE(sink.begin_sequence(n));
  buf.resize(buf.size() + 64, 'x');
  largest_alloc = 0;
  auto x = load<shared_bytes>(buf);
  EXPECT_FALSE(x);
  EXPECT_LT(largest_alloc.load(), std::size_t{1} << 20);
}

TEST_F(Messages, HostileSnapshotLengthIsRefused) {
  auto x = small_snapshot();
  // The data length is the varbyte right after the index; rebuild the frame
  // with a huge length in its place.
  auto head = save(model_snapshot{x.sender, x.incarnation, x.version,
                                  x.send_time_ns, x.index, shared_bytes{}});
  ASSERT_GT(head.size(), 1u);
  head.pop_back(); // the empty buffer's length (one varbyte 0)
  caf::binary_serializer sink{sys, head};
  std::size_t n = std::size_t{1} << 40;
  ASSERT_FALSE(sink.begin_sequence(n));
  head.insert(head.end(), 128, 'x');
  auto y = load<model_snapshot>(head);
  EXPECT_FALSE(y);
}

// -- validate(model_snapshot) -------------------------------------------------

class ValidateSnapshot : public ::testing::Test {
 protected:
  model_snapshot x = small_snapshot();

  void expect_rejected(const char* what) {
    auto err = dice::validate(x);
    EXPECT_TRUE(dice::is(err, dice::errc::malformed_input))
      << what << ": " << dice::render(err);
  }
};

TEST_F(ValidateSnapshot, AcceptsAConsistentSnapshot) {
  EXPECT_FALSE(dice::validate(x)) << dice::render(dice::validate(x));
  EXPECT_FALSE(dice::validate(model_snapshot{}));
}

TEST_F(ValidateSnapshot, RejectsAnUnknownDtype) {
  x.index[0].type = static_cast<dice::dtype>(200);
  expect_rejected("unknown dtype");
}

TEST_F(ValidateSnapshot, RejectsANegativeDimension) {
  x.index[0].shape = {-3, -4};
  expect_rejected("negative dimension");
}

TEST_F(ValidateSnapshot, RejectsAnNbytesMismatch) {
  x.index[0].nbytes -= 4;
  expect_rejected("nbytes mismatch");
}

TEST_F(ValidateSnapshot, RejectsAnOverflowingShape) {
  x.index[0].shape = {std::int64_t{1} << 62, std::int64_t{1} << 62};
  expect_rejected("overflowing shape");
}

TEST_F(ValidateSnapshot, RejectsATensorOutsideTheBuffer) {
  x.index[1].offset = x.data.size() - 4;
  expect_rejected("out of buffer");
}

TEST_F(ValidateSnapshot, RejectsOverlappingTensors) {
  x.index[1].offset = x.index[0].offset + 8;
  expect_rejected("overlap");
}

TEST_F(ValidateSnapshot, RejectsADuplicateName) {
  x.index[1].name = x.index[0].name;
  expect_rejected("duplicate name");
}

// The learner group's router text: a restarted learner's join request
// round-trips; anything else is refused.
TEST(LearnerGroupText, JoinRoundTripsStrictly) {
  dice::learner_group_join j{7, 18446744073709551615ull};
  auto jj = dice::parse_learner_group_join(dice::to_wire(j));
  ASSERT_TRUE(jj);
  EXPECT_EQ(jj->node, 7u);
  EXPECT_EQ(jj->nonce, j.nonce);
  for (auto bad : {"dice-lg1 join 7", "dice-lg1 join 7 1 2",
                   "dice-lg1 join -1 3", "dice-lg1 join 7 x",
                   "dice-lg1 join 4294967296 1", "dice-lg1 alive 1 2"})
    EXPECT_FALSE(dice::parse_learner_group_join(bad)) << bad;
}

} // namespace
