// Shared-memory items are copied through mappings (the writer's view of a
// recycled segment, the reader's cached view): a segment truncated or
// rewritten while it is copied must give an error, never a crash (SIGBUS)
// and never torn bytes, and a recycled segment is read as its new item.

#include "dice/core/errc.hpp"
#include "dice/storage/storage.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace dice;

// 4 MB of tensor bytes: well above the size copied through mappings.
model_snapshot big_snapshot(std::uint8_t seed) {
  std::vector<float> xs(1 << 20);
  for (std::size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>(i) * 0.25f + seed;
  snapshot_builder b;
  b.add("w", dtype::float32, {static_cast<std::int64_t>(xs.size())}, xs.data(),
        xs.size() * sizeof(float));
  return b.build(3, 99, seed, 1234);
}

storage_options shm_opts() {
  storage_options so;
  so.kind = storage_kind::shm;
  so.node = 3;
  return so;
}

// Loads `ref` until `want` errors that say `what`, or the deadline, while
// `meddle` runs on another thread; returns (loads that returned exactly `x`,
// errors whose text contains `what`). Any other successful load is a failure
// (torn).
std::pair<int, int> load_while(const storage_ref& ref, const model_snapshot& x,
                               const char* what, void (*meddle)(int, size_t),
                               int fd, int want) {
  std::atomic<bool> stop{false};
  std::thread t{[&] {
    while (!stop.load())
      meddle(fd, ref.size);
  }};
  int good = 0;
  int hits = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (hits < want && std::chrono::steady_clock::now() < deadline) {
    auto y = load_snapshot(ref);
    if (y) {
      EXPECT_EQ(*y, x) << "torn bytes returned as a good load";
      ++good;
    } else if (caf::to_string(y.error()).find(what) != std::string::npos) {
      ++hits;
    }
  }
  stop = true;
  t.join();
  return {good, hits};
}

// Without the SIGBUS guard the loader died of SIGBUS here (the copy ran
// into pages the truncation had just removed).
TEST(ShmView, TruncatedWhileCopiedIsAnErrorNotACrash) {
  auto x = big_snapshot(1);
  auto ref = store(shm_opts(), x);
  ASSERT_TRUE(ref);
  EXPECT_EXIT(
    {
      int fd = ::shm_open(ref->path.c_str(), O_RDWR, 0);
      if (fd < 0)
        std::_Exit(3);
      auto flip = [](int f, std::size_t n) {
        if (::ftruncate(f, 0) != 0 || ::ftruncate(f, static_cast<off_t>(n)))
          std::_Exit(3);
      };
      auto got = load_while(*ref, x, "truncated while reading", flip, fd, 3);
      std::_Exit(::testing::Test::HasFailure() ? 4 : got.second > 0 ? 0 : 5);
    },
    ::testing::ExitedWithCode(0), "");
  remove_storage(*ref);
}

// The writer copies into a recycled segment through its own view; someone
// who truncates that segment meanwhile (anyone who can write /dev/shm as
// this user can) gets the store an error, not the writer a SIGBUS.
TEST(ShmView, TruncatedWhileStoredIsAnErrorNotACrash) {
  auto x = big_snapshot(5);
  auto ref = store(shm_opts(), x);
  ASSERT_TRUE(ref);
  EXPECT_EXIT(
    {
      // The segment's inode, which the next stores reuse once it is pooled.
      int fd = ::shm_open(ref->path.c_str(), O_RDWR, 0);
      if (fd < 0 || remove_storage(*ref))
        std::_Exit(3);
      std::atomic<bool> stop{false};
      std::thread t{[&] {
        while (!stop.load())
          if (::ftruncate(fd, 0) != 0
              || ::ftruncate(fd, static_cast<off_t>(ref->size)) != 0)
            std::_Exit(3);
      }};
      int hits = 0;
      auto deadline = std::chrono::steady_clock::now() + 10s;
      while (hits == 0 && std::chrono::steady_clock::now() < deadline) {
        auto r = store(shm_opts(), x);
        if (r)
          remove_storage(*r); // back to the pool: the same inode again
        else if (caf::to_string(r.error()).find("truncated while written")
                 != std::string::npos)
          ++hits;
      }
      stop = true;
      t.join();
      std::_Exit(hits > 0 ? 0 : 5);
    },
    ::testing::ExitedWithCode(0), "");
  remove_storage(*ref);
}

// A writer rewrites the bytes under a reader's copy: each load returns the
// stored item exactly or a checksum mismatch (the hash covers the copy the
// loader returns, not the shared pages).
TEST(ShmView, RewrittenWhileCopiedIsAMismatchNeverTorn) {
  auto x = big_snapshot(2);
  auto ref = store(shm_opts(), x);
  ASSERT_TRUE(ref);
  int fd = ::shm_open(ref->path.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  auto rewrite = [](int f, std::size_t n) {
    // Every 4 KiB page of the second half loses and regains its bytes.
    std::vector<std::uint8_t> keep(n / 2);
    if (::pread(f, keep.data(), keep.size(), static_cast<off_t>(n / 2)) < 0)
      return;
    for (std::size_t i = 0; i < keep.size(); i += 4096) {
      std::uint8_t junk = keep[i] ^ 0x5a;
      if (::pwrite(f, &junk, 1, static_cast<off_t>(n / 2 + i)) < 0)
        return;
    }
    if (::pwrite(f, keep.data(), keep.size(), static_cast<off_t>(n / 2)) < 0)
      return;
  };
  auto hits = load_while(*ref, x, "checksum mismatch", rewrite, fd, 20).second;
  ::close(fd);
  EXPECT_GT(hits, 0) << "the rewrite never overlapped a load";
  // Whole again: the item loads.
  auto y = load_snapshot(*ref);
  ASSERT_TRUE(y);
  EXPECT_EQ(*y, x);
  remove_storage(*ref);
}

// The second store reuses the first's segment (its pages, through the
// writer's view) and the reader's cached view of it: the new name loads
// the new item, the old name is missing.
TEST(ShmView, AReusedSegmentLoadsTheNewItemThroughTheSameView) {
  auto x1 = big_snapshot(3);
  auto x2 = big_snapshot(4);
  ASSERT_EQ(x1.data.size(), x2.data.size());
  auto r1 = store(shm_opts(), x1);
  ASSERT_TRUE(r1);
  ASSERT_TRUE(load_snapshot(*r1)); // maps and keeps a view
  ASSERT_FALSE(remove_storage(*r1));
  for (auto x : {x2, x1, x2}) {
    auto r2 = store(shm_opts(), x);
    ASSERT_TRUE(r2);
    auto old = load_snapshot(*r1);
    ASSERT_FALSE(old);
    EXPECT_TRUE(is(old.error(), errc::storage_missing));
    auto y = load_snapshot(*r2);
    ASSERT_TRUE(y);
    EXPECT_EQ(*y, x);
    ASSERT_FALSE(remove_storage(*r2));
    r1 = r2;
  }
}

} // namespace
