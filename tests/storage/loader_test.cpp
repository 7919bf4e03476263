// Storage and loaders (spec §1.4): files and shared memory, TTL counted from
// completion, DI-engine's warning for a deleted or expired item, cleanup
// when a loader stops, and data handed out never changes afterwards.

#include "dice/actors/model_loader.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/security/trust.hpp"
#include "dice/storage/storage.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include "support/deterministic.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using dice::model_snapshot;
using dice::storage_kind;
using dice::storage_ref;

model_snapshot make_snapshot(std::size_t n, std::int64_t version,
                             std::uint8_t seed = 1) {
  std::vector<float> xs(n);
  for (std::size_t i = 0; i < n; ++i)
    xs[i] = static_cast<float>(i) * 0.5f + seed;
  dice::snapshot_builder b;
  b.add("w", dice::dtype::float32, {static_cast<std::int64_t>(n)}, xs.data(),
        xs.size() * sizeof(float));
  b.add("b", dice::dtype::float32, {1}, xs.data(), sizeof(float));
  // Sender 3: the node whose loader (options below) stores it.
  return b.build(3, 99, version, 1234);
}

dice::context_delta make_delta() {
  dice::context_delta d;
  d.sender = 4;
  d.seq = 2;
  d.env_step = 10;
  d.env_episode = 1;
  d.trajectories.push_back(dice::pack(std::vector<int>{1, 2, 3}, 4, 7));
  d.trajectory_end_idx = {2};
  d.has_trajectory_end_idx = true;
  return d;
}

bool shm_exists(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0)
    return false;
  ::close(fd);
  return true;
}

bool exists(const storage_ref& ref) {
  return ref.kind == storage_kind::shm ? shm_exists(ref.path)
                                       : fs::exists(ref.path);
}

// A receiver of (topic, T) that keeps what it got.
template <class T>
caf::behavior keeper(caf::event_based_actor*, std::vector<T>* out) {
  return {[=](const std::string&, const T& x) {
    out->push_back(x);
  }};
}

class Loaders : public dice::test::deterministic,
                public ::testing::WithParamInterface<storage_kind> {
 protected:
  Loaders() {
    dir = fs::temp_directory_path()
      / ("dice-loader-test-" + std::to_string(::getpid()));
    opts.kind = GetParam();
    opts.dirname = (dir / "nested" / "dir").string();
    opts.ttl = 5s;
    opts.node = 3;
    opts.detached = false; // on the test coordinator, with its fake clock
  }

  ~Loaders() override {
    fs::remove_all(dir);
  }

  dice::model_loader_actor spawn_loader() {
    auto h = dice::spawn_model_loader(sys, opts);
    spawned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  template <class Handle, class... Ts>
  storage_ref save(const Handle& h, Ts&&... xs) {
    storage_ref result;
    auto rh = sink->request(h, caf::infinite, dice::save_atom::value,
                            std::forward<Ts>(xs)...);
    run();
    rh.receive(
      [&](storage_ref& ref) {
        result = std::move(ref);
      },
      [&](caf::error& err) {
        ADD_FAILURE() << caf::to_string(err);
      });
    return result;
  }

  fs::path dir;
  dice::loader_options opts;
};

TEST_P(Loaders, SnapshotRoundTripGivesFreshBytes) {
  auto loader = spawn_loader();
  auto x = make_snapshot(1000, 5);
  auto ref = save(loader, x);
  ASSERT_TRUE(exists(ref));
  EXPECT_EQ(ref.kind, GetParam());
  EXPECT_EQ(ref.origin, 3u);
  EXPECT_NE(ref.checksum, 0u);
  if (GetParam() == storage_kind::file) {
    EXPECT_EQ(fs::path{ref.path}.parent_path(), fs::path{opts.dirname});
  }
  std::vector<model_snapshot> got;
  auto k = sys.spawn(keeper<model_snapshot>, &got);
  spawned.push_back(k);
  sink->send(loader, dice::load_atom::value, ref, k, std::string{"m"});
  run();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], x);
  EXPECT_FALSE(got[0].data.same_buffer(x.data));
}

// Issue 9 item 3: a reference speaks for the node that sent it; a stored
// snapshot naming another node is not delivered.
TEST_P(Loaders, ASnapshotNamingAnotherNodeThanTheReferenceIsDropped) {
  auto loader = spawn_loader();
  auto x = make_snapshot(100, 5);
  x.sender = 0;
  auto ref = save(loader, x);
  std::vector<model_snapshot> got;
  auto k = sys.spawn(keeper<model_snapshot>, &got);
  spawned.push_back(k);
  auto before = dice::counter(dice::trust_event::forged_origin);
  sink->send(loader, dice::load_atom::value, ref, k, std::string{"m"});
  run();
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::forged_origin), before + 1);
}

// A loader takes requests from its own node's actors that name themselves.
TEST_P(Loaders, AnonymousRequestsAreDropped) {
  auto loader = spawn_loader();
  auto ref = save(loader, make_snapshot(100, 5));
  std::vector<model_snapshot> got;
  auto k = sys.spawn(keeper<model_snapshot>, &got);
  spawned.push_back(k);
  auto before = dice::counter(dice::trust_event::anonymous_dropped);
  caf::anon_send(loader, dice::load_atom::value, ref, k, std::string{"m"});
  run();
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(dice::counter(dice::trust_event::anonymous_dropped), before + 1);
}

TEST_P(Loaders, ContextRoundTrip) {
  auto loader = dice::spawn_storage_loader(sys, opts);
  spawned.push_back(caf::actor_cast<caf::actor>(loader));
  auto d = make_delta();
  auto ref = save(loader, d);
  auto back = dice::load_context(ref);
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_EQ(*back, d);
  EXPECT_EQ(dice::unpack<int>(back->trajectories).value(),
            (std::vector<int>{1, 2, 3}));
}

TEST_P(Loaders, TtlCountsFromCompletionThenTheWaitGetsTheWarning) {
  auto loader = spawn_loader();
  auto ref = save(loader, make_snapshot(100, 1));
  advance(4s);
  EXPECT_TRUE(exists(ref)) << "removed before its ttl";
  auto ref2 = save(loader, make_snapshot(100, 2)); // completes at t=4s
  advance(1500ms);
  EXPECT_FALSE(exists(ref)) << "kept after its ttl";
  EXPECT_TRUE(exists(ref2));
  advance(3s);
  EXPECT_TRUE(exists(ref2));
  advance(1s);
  EXPECT_FALSE(exists(ref2));
  // A late reader: DI-engine's warning, nothing delivered, nothing thrown.
  std::vector<model_snapshot> got;
  auto k = sys.spawn(keeper<model_snapshot>, &got);
  spawned.push_back(k);
  sink->send(loader, dice::load_atom::value, ref, k, std::string{"m"});
  run();
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(logs.count("Model file has been deleted on node 3, maybe you can "
                       "increase the ttl."),
            1u);
}

TEST_P(Loaders, DeletedItemIsStorageMissing) {
  auto loader = spawn_loader();
  auto ref = save(loader, make_snapshot(100, 1));
  ASSERT_FALSE(dice::remove_storage(ref));
  auto x = dice::load_snapshot(ref);
  ASSERT_FALSE(x);
  EXPECT_TRUE(dice::is(x.error(), dice::errc::storage_missing));
  auto rh = sink->request(loader, caf::infinite, dice::load_atom::value, ref);
  run();
  bool failed = false;
  rh.receive(
    [&](model_snapshot&) {
      ADD_FAILURE() << "loaded a deleted item";
    },
    [&](caf::error& err) {
      failed = dice::is(err, dice::errc::storage_missing);
    });
  EXPECT_TRUE(failed);
  EXPECT_EQ(logs.count("Model file has been deleted on node 3"), 1u);
}

TEST_P(Loaders, StoppingALoaderRemovesWhatItKept) {
  auto loader = spawn_loader();
  std::vector<storage_ref> refs;
  for (int i = 0; i < 3; ++i)
    refs.push_back(save(loader, make_snapshot(100, i)));
  for (auto& ref : refs)
    ASSERT_TRUE(exists(ref));
  caf::anon_send_exit(loader, caf::exit_reason::user_shutdown);
  run();
  for (auto& ref : refs)
    EXPECT_FALSE(exists(ref)) << ref.path;
}

TEST_P(Loaders, CorruptItemIsAnErrorNotACrash) {
  auto loader = spawn_loader();
  auto ref = save(loader, make_snapshot(1000, 1));
  {
    // Flip a byte in place.
    int fd = ref.kind == storage_kind::shm
      ? ::shm_open(ref.path.c_str(), O_RDWR, 0)
      : ::open(ref.path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    auto p = static_cast<std::uint8_t*>(
      ::mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED);
    p[ref.size - 1] ^= 0xff;
    ::munmap(p, ref.size);
  }
  auto x = dice::load_snapshot(ref);
  ASSERT_FALSE(x);
  EXPECT_TRUE(dice::is(x.error(), dice::errc::malformed_input));
}

TEST_P(Loaders, DataHandedOutNeverChangesLater) {
  auto loader = spawn_loader();
  auto x1 = make_snapshot(1000, 1, 1);
  auto ref = save(loader, x1);
  auto got = dice::load_snapshot(ref);
  ASSERT_TRUE(got);
  auto before = got->data;
  // Rewrite the item in place (DI-engine's shm loader reused its buffers,
  // so a later load overwrote what an earlier callback held).
  {
    int fd = ref.kind == storage_kind::shm
      ? ::shm_open(ref.path.c_str(), O_RDWR, 0)
      : ::open(ref.path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    auto p = static_cast<std::uint8_t*>(
      ::mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p + ref.size - 4000, 0, 4000);
    ::munmap(p, ref.size);
  }
  auto again = save(loader, make_snapshot(1000, 2, 7));
  ASSERT_TRUE(dice::load_snapshot(again));
  EXPECT_EQ(*got, x1);
  EXPECT_TRUE(got->data.same_buffer(before));
}

INSTANTIATE_TEST_SUITE_P(Kinds, Loaders,
                         ::testing::Values(storage_kind::file,
                                           storage_kind::shm),
                         [](const auto& info) {
                           return info.param == storage_kind::file
                             ? std::string{"file"}
                             : std::string{"shm"};
                         });

// A detached loader on a real scheduler: the role actor's thread never does
// the disk work.
TEST(DetachedLoader, SavesAndLoadsOnItsOwnThread) {
  caf::actor_system_config cfg;
  dice::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto dir = fs::temp_directory_path()
    / ("dice-detached-test-" + std::to_string(::getpid()));
  dice::loader_options opts;
  opts.dirname = dir.string();
  auto loader = dice::spawn_model_loader(sys, opts);
  caf::scoped_actor self{sys};
  auto x = make_snapshot(1 << 16, 3);
  storage_ref ref;
  self->request(loader, 10s, dice::save_atom::value, x)
    .receive(
      [&](storage_ref& r) {
        ref = r;
      },
      [&](caf::error& err) {
        FAIL() << caf::to_string(err);
      });
  self->request(loader, 10s, dice::load_atom::value, ref)
    .receive(
      [&](model_snapshot& y) {
        EXPECT_EQ(y, x);
      },
      [&](caf::error& err) {
        FAIL() << caf::to_string(err);
      });
  self->send_exit(loader, caf::exit_reason::user_shutdown);
  self->wait_for(loader);
  EXPECT_FALSE(fs::exists(ref.path));
  fs::remove_all(dir);
}

// Removed segments are recycled for later stores (no page allocation):
// under its old name a recycled segment is gone, and a reused one holds
// exactly the new item, whatever its size.
TEST(ShmPool, ARecycledSegmentIsMissingUnderItsOldName) {
  dice::storage_options opts;
  opts.kind = storage_kind::shm;
  auto x1 = make_snapshot(100000, 1, 1);
  auto r1 = dice::store(opts, x1);
  ASSERT_TRUE(r1);
  ASSERT_FALSE(dice::remove_storage(*r1));
  EXPECT_FALSE(shm_exists(r1->path));
  for (std::size_t n : {50000u, 150000u}) {
    auto x2 = make_snapshot(n, 2, 9);
    auto r2 = dice::store(opts, x2);
    ASSERT_TRUE(r2);
    auto old = dice::load_snapshot(*r1);
    ASSERT_FALSE(old);
    EXPECT_TRUE(dice::is(old.error(), dice::errc::storage_missing));
    auto y = dice::load_snapshot(*r2);
    ASSERT_TRUE(y);
    EXPECT_EQ(*y, x2);
    ASSERT_FALSE(dice::remove_storage(*r2));
    EXPECT_FALSE(shm_exists(r2->path));
  }
}

} // namespace
