// shared_bytes and the buffers under them: the snapshot builder's recycled,
// zero-padded buffer and the checksum it computes while copying, the sealed
// memfd blocks same-host peers map and their pool, and copies that share
// one buffer. LibTorch-free.

#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/shared_bytes.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"

#include "support/pattern.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using dice::model_snapshot;
using dice::shared_bytes;

using dice::test::pattern;

model_snapshot small_snapshot() {
  dice::snapshot_builder b;
  auto w = pattern(3 * 4 * 4, 3);
  b.add("fc.weight", dice::dtype::float32, {3, 4}, w.data(), w.size());
  return b.build(2, 77, 9, 123456789);
}

/// `x` through CAF's binary serializer and back (what BASP carries).
caf::expected<shared_bytes> through_the_wire(const shared_bytes& x) {
  struct config : caf::actor_system_config {
    config() {
      set("scheduler.policy", caf::atom("testing"));
      set("logger.verbosity", caf::atom("quiet"));
      dice::add_message_types(*this);
    }
  };
  config cfg;
  caf::actor_system sys{cfg};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto copy = x;
  if (auto err = sink(copy))
    return err;
  shared_bytes result;
  caf::binary_deserializer source{sys, buf};
  if (auto err = source(result))
    return err;
  return result;
}

// The builder's buffer is uninitialized and recycled: the alignment gaps
// between tensors must still be zero, or bytes this process freed before
// would leave the node inside a snapshot. A freed buffer of the same size,
// full of 0xAA, is what the builder gets back from the pool here.
TEST(SharedBytes, SnapshotPaddingIsZeroInARecycledBuffer) {
  constexpr std::size_t n = 1 << 20; // on a mapping of its own (pooled)
  auto a = pattern(3, 5);
  auto b = pattern(n - 128, 6);
  auto total = dice::snapshot_builder::padded(a.size())
    + dice::snapshot_builder::padded(b.size());
  for (int round = 0; round < 2; ++round) {
    {
      dice::writable_bytes dirty{total};
      std::memset(dirty.data(), 0xAA, dirty.size());
      // What the builder takes its buffer from.
      auto shareable = dice::writable_bytes::shareable(total);
      std::memset(shareable.data(), 0xAA, shareable.size());
    }
    dice::snapshot_builder builder{total};
    builder.add("a", dice::dtype::uint8, {3}, a.data(), a.size());
    builder.add("b", dice::dtype::uint8, {static_cast<std::int64_t>(b.size())},
                b.data(), b.size());
    auto x = builder.build(1, 0, 1, 0);
    ASSERT_EQ(x.data.size(), 64 + b.size());
    ASSERT_FALSE(dice::validate(x));
    EXPECT_EQ(std::memcmp(x.data.data(), a.data(), 3), 0);
    for (std::size_t i = 3; i < 64; ++i)
      ASSERT_EQ(x.data.data()[i], 0) << "padding byte " << i;
    EXPECT_EQ(std::memcmp(x.data.data() + 64, b.data(), b.size()), 0);
  }
}

// A builder that reserved nothing grows as tensors come and keeps them all.
TEST(SharedBytes, ABuilderWithoutAReservationGrows) {
  dice::snapshot_builder builder;
  std::vector<std::vector<std::uint8_t>> parts;
  for (std::size_t i = 0; i < 20; ++i) {
    parts.push_back(pattern(1000 * (i + 1), static_cast<std::uint32_t>(i)));
    builder.add("t" + std::to_string(i), dice::dtype::uint8,
                {static_cast<std::int64_t>(parts.back().size())},
                parts.back().data(), parts.back().size());
  }
  auto x = builder.build(1, 0, 1, 0);
  ASSERT_FALSE(dice::validate(x));
  ASSERT_EQ(x.index.size(), parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i)
    EXPECT_EQ(std::memcmp(x.data.data() + x.index[i].offset, parts[i].data(),
                          parts[i].size()),
              0)
      << "tensor " << i;
}

// The builder hashes each block as it copies it in, padding included, so
// the data plane sends its bytes without a pass of its own
// (shared_bytes::known_checksum). The checksum is that of the whole buffer,
// through the growth of a builder that reserved too little; copies carry
// it; bytes read from the wire, or wrapped from a vector, carry none.
TEST(SharedBytes, ABuiltSnapshotKnowsTheChecksumOfItsBytes) {
  dice::snapshot_builder builder{100}; // grows twice below
  auto a = pattern(3, 1);
  auto b = pattern(200'001, 2); // several of the hash's 32 KiB blocks
  auto c = pattern(77, 3);
  builder.add("a", dice::dtype::uint8, {3}, a.data(), a.size());
  builder.add("b", dice::dtype::uint8, {200'001}, b.data(), b.size());
  builder.add("c", dice::dtype::uint8, {77}, c.data(), c.size());
  auto x = builder.build(1, 0, 1, 0);
  ASSERT_FALSE(dice::validate(x));
  auto known = x.data.known_checksum();
  ASSERT_TRUE(known);
  EXPECT_EQ(*known, dice::checksum64(x.data.data(), x.data.size()));
  auto copy = x.data;
  EXPECT_EQ(copy.known_checksum(), known);
  auto moved = std::move(copy);
  EXPECT_EQ(moved.known_checksum(), known);
  EXPECT_FALSE(copy.known_checksum());
  // The next snapshot of the same builder hashes only its own bytes.
  builder.add("c", dice::dtype::uint8, {77}, c.data(), c.size());
  auto y = builder.build(1, 0, 2, 0);
  ASSERT_TRUE(y.data.known_checksum());
  EXPECT_EQ(*y.data.known_checksum(), dice::checksum64(c.data(), c.size()));
  // A checksum never comes off the wire: a peer's claim is not one.
  auto wire = through_the_wire(x.data);
  ASSERT_TRUE(wire);
  EXPECT_TRUE(*wire == x.data);
  EXPECT_FALSE(wire->known_checksum());
  EXPECT_FALSE(shared_bytes{std::vector<std::uint8_t>(9, 1)}.known_checksum());
  // Above 8 MiB, reserved or grown into, the data plane's writer hashes
  // instead (the copy with the hash cost more than it saved there).
  std::vector<std::uint8_t> half(5 << 20, 1);
  dice::snapshot_builder reserved{2 * half.size()};
  reserved.add("a", dice::dtype::uint8, {5 << 20}, half.data(), half.size());
  reserved.add("b", dice::dtype::uint8, {5 << 20}, half.data(), half.size());
  EXPECT_FALSE(reserved.build(1, 0, 1, 0).data.known_checksum());
  dice::snapshot_builder grown;
  grown.add("a", dice::dtype::uint8, {5 << 20}, half.data(), half.size());
  grown.add("b", dice::dtype::uint8, {5 << 20}, half.data(), half.size());
  auto z = grown.build(1, 0, 1, 0);
  EXPECT_FALSE(z.data.known_checksum());
  ASSERT_EQ(z.data.size(), 2 * half.size());
  EXPECT_EQ(z.data.data()[z.data.size() - 1], 1);
  // ... and the builder hashes again for the next, smaller snapshot.
  grown.add("c", dice::dtype::uint8, {77}, c.data(), c.size());
  EXPECT_TRUE(grown.build(1, 0, 2, 0).data.known_checksum());
}

// From 256 KiB on, shareable bytes fill a memfd sealed against resizing
// (what a same-host peer maps), recycled by size with its header cleared;
// a retired block is closed, never handed out again.
TEST(SharedBytes, ShareableBytesLiveInARecycledSealedMemfd) {
  constexpr std::size_t n = (1 << 20) + 40;
  auto inode = [](int fd) {
    struct stat st;
    return ::fstat(fd, &st) == 0 ? st.st_ino : ino_t{0};
  };
  ino_t first = 0;
  {
    shared_bytes x{dice::writable_bytes::shareable(n)};
    ASSERT_EQ(x.size(), n);
    auto b = x.block();
    ASSERT_NE(b, nullptr);
    struct stat st;
    ASSERT_EQ(::fstat(b->fd, &st), 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size),
              dice::detail::shareable_header + n);
    constexpr int seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW;
    EXPECT_EQ(::fcntl(b->fd, F_GET_SEALS) & seals, seals);
    first = st.st_ino;
    auto copy = x;
    EXPECT_EQ(copy.block(), b);
    std::memset(b->base, 0x77, 64); // a header, as a send writes it
    b->tag = 42;
  }
  {
    shared_bytes y{dice::writable_bytes::shareable(n)};
    auto b = y.block();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(inode(b->fd), first);
    for (std::size_t i = 0; i < 64; ++i)
      ASSERT_EQ(b->base[i], 0) << "header byte " << i;
    EXPECT_EQ(b->tag, 0u);
    b->retired = true;
  }
  shared_bytes z{dice::writable_bytes::shareable(n)};
  ASSERT_NE(z.block(), nullptr);
  EXPECT_NE(inode(z.block()->fd), first);
  // Small buffers, and plain ones, are no block.
  EXPECT_EQ(shared_bytes{dice::writable_bytes::shareable(1000)}.block(),
            nullptr);
  EXPECT_EQ(shared_bytes{dice::writable_bytes{n}}.block(), nullptr);
}

// Idle blocks wait for a request of their size, the newest first; beyond
// eight the oldest is closed (the pool the mappings share, messages/
// shared_bytes.cpp's size_pool).
TEST(SharedBytes, IdleShareableBlocksAreEightAtMostNewestFirst) {
  auto inode = [](const shared_bytes& x) {
    struct stat st;
    return x.block() != nullptr && ::fstat(x.block()->fd, &st) == 0 ? st.st_ino
                                                                    : ino_t{0};
  };
  // Sizes no other test asks for.
  constexpr std::size_t base = (300 << 10) + 8;
  ino_t older = 0;
  ino_t newer = 0;
  {
    shared_bytes x{dice::writable_bytes::shareable(base)};
    shared_bytes y{dice::writable_bytes::shareable(base)};
    older = inode(x);
    newer = inode(y);
    ASSERT_NE(older, ino_t{0});
    ASSERT_NE(newer, older);
    x = shared_bytes{}; // idle first
  }
  {
    shared_bytes again{dice::writable_bytes::shareable(base)};
    EXPECT_EQ(inode(again), newer);
  }
  ino_t kept = 0;
  {
    shared_bytes x{dice::writable_bytes::shareable(base)};
    kept = inode(x);
  }
  // Eight idle blocks of other sizes after it: both of `base` are closed.
  for (std::size_t i = 1; i <= 8; ++i)
    shared_bytes{dice::writable_bytes::shareable(base + i * 4096)};
  shared_bytes fresh{dice::writable_bytes::shareable(base)};
  EXPECT_NE(inode(fresh), kept);
  EXPECT_NE(inode(fresh), older);
  EXPECT_NE(inode(fresh), newer);
}

TEST(SharedBytes, SharedBytesCopiesShareTheBuffer) {
  shared_bytes a{pattern(1024)};
  auto first = a.data();
  EXPECT_EQ(a.use_count(), 1);
  auto b = a;
  EXPECT_TRUE(b.same_buffer(a));
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(a.use_count(), 2);
  {
    auto snap = small_snapshot();
    auto copy = snap;
    EXPECT_TRUE(copy.data.same_buffer(snap.data));
    EXPECT_EQ(snap.data.use_count(), 2);
    // A caf::message holding a snapshot shares it too (copy-on-write).
    auto msg = caf::make_message(snap);
    auto msg2 = msg;
    EXPECT_TRUE(msg2.get_as<model_snapshot>(0).data.same_buffer(snap.data));
  }
  shared_bytes c{pattern(1024)};
  EXPECT_FALSE(c.same_buffer(a));
  EXPECT_TRUE(c == a); // equal content, different buffers
  EXPECT_TRUE(shared_bytes{} == shared_bytes{std::vector<std::uint8_t>{}});
  EXPECT_FALSE(shared_bytes{pattern(4, 1)} == shared_bytes{pattern(4, 2)});
}

} // namespace
