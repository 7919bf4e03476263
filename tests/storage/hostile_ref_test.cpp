// Storage references come from the wire: a peer must not make a loader open
// what it likes (a file elsewhere, a symlink, a FIFO that blocks it for
// ever), and what a loader reads must not change under it (a writer that
// truncates or recycles an item while it is read).

#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/security/trust.hpp"
#include "dice/storage/storage.hpp"

#include "support/deterministic.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace dice;
namespace fs = std::filesystem;

context_delta sample_delta() {
  context_delta d;
  d.sender = 2;
  d.incarnation = 7;
  d.seq = 1;
  d.base = 1;
  d.env_step = 5;
  d.trajectories = {pack(std::vector<int>(4096, 7), 2)};
  d.has_trajectory_end_idx = true;
  return d;
}

// The stored item's file or segment, opened read-write as a writer that
// can reach it would (-1 on failure).
int open_for_writing(const storage_ref& ref) {
  return ref.kind == storage_kind::shm ? ::shm_open(ref.path.c_str(), O_RDWR, 0)
                                       : ::open(ref.path.c_str(), O_RDWR);
}

class HostileRef : public dice::test::deterministic {
 protected:
  HostileRef()
    : root(fs::temp_directory_path()
           / ("dice-hostile-ref-" + std::to_string(::getpid()))),
      own(root / "own"), elsewhere(root / "elsewhere") {
    fs::create_directories(own);
    fs::create_directories(elsewhere);
  }

  ~HostileRef() override {
    fs::remove_all(root);
  }

  storage_options opts_in(const fs::path& dir) {
    storage_options so;
    so.dirname = dir.string();
    so.node = 2;
    return so;
  }

  // What the loader (confined to `own`) answers for `ref`.
  caf::expected<context_delta> ask_loader(const storage_ref& ref) {
    loader_options lo;
    lo.dirname = own.string();
    lo.node = 0;
    lo.detached = false;
    auto loader = spawn_storage_loader(sys, lo);
    spawned.push_back(caf::actor_cast<caf::actor>(loader));
    run();
    caf::expected<context_delta> result{caf::error{}};
    sink->send(loader, load_atom::value, ref);
    run();
    sink->receive(
      [&](context_delta& d) {
        result = std::move(d);
      },
      [&](caf::error& err) {
        result = std::move(err);
      },
      caf::after(0s) >>
        [&] {
          result = make_error(errc::timeout, "none");
        });
    return result;
  }

  fs::path root;
  fs::path own;
  fs::path elsewhere;
};

// A real dice item outside the loader's directory, named by its absolute
// path, through "..", or through a symlink inside the directory: all were
// loaded; all are refused now, and the refusal is counted.
TEST_F(HostileRef, PathsOutsideTheLoadersDirectoryAreRefused) {
  auto outside = store(opts_in(elsewhere), sample_delta());
  ASSERT_TRUE(outside);
  auto name = fs::path{outside->path}.filename().string();
  std::vector<std::pair<std::string, storage_ref>> refs;
  refs.emplace_back("absolute path elsewhere", *outside);
  auto dotdot = *outside;
  dotdot.path = (own / ".." / "elsewhere" / name).string();
  refs.emplace_back("'..' out of the directory", dotdot);
  auto link = own / name;
  fs::create_symlink(outside->path, link);
  auto via_link = *outside;
  via_link.path = link.string();
  refs.emplace_back("symlink inside the directory", via_link);
  auto passwd = *outside;
  passwd.path = "/etc/passwd";
  refs.emplace_back("/etc/passwd", passwd);
  auto shm_escape = *outside;
  shm_escape.kind = storage_kind::shm;
  shm_escape.path = "/../../tmp/" + name;
  refs.emplace_back("shm name with '..'", shm_escape);
  for (auto& [what, ref] : refs) {
    auto rejected = counter(trust_event::message_rejected);
    auto x = ask_loader(ref);
    ASSERT_FALSE(x) << what << " was loaded";
    if (what == "symlink inside the directory") {
      EXPECT_NE(render(x.error()).find("symbolic link"), std::string::npos)
        << render(x.error());
    } else {
      EXPECT_TRUE(is(x.error(), errc::unauthorized))
        << what << ": " << render(x.error());
      EXPECT_EQ(counter(trust_event::message_rejected), rejected + 1) << what;
    }
  }
  // The loader's own items still load.
  auto inside = store(opts_in(own), sample_delta());
  ASSERT_TRUE(inside);
  auto x = ask_loader(*inside);
  ASSERT_TRUE(x) << render(x.error());
  EXPECT_EQ(*x, sample_delta());
}

// A FIFO with a dice name in the loader's own directory: opening it for
// reading waited for a writer for ever (the loader hung). Refused at once.
// An item in the loader's own directory that another user owns, or that
// group or others may write, was planted or changed by someone else:
// refused with why (before: loaded as this node's context).
TEST_F(HostileRef, ItemsOfAnotherUserOrWritableByOthersAreRefused) {
  auto item = store(opts_in(own), sample_delta());
  ASSERT_TRUE(item);
  ASSERT_TRUE(ask_loader(*item)) << "stored 0600 by this user: loads";
  ::chmod(item->path.c_str(), 0666);
  auto writable = ask_loader(*item);
  ASSERT_FALSE(writable) << "a 0666 item was loaded";
  EXPECT_NE(render(writable.error()).find("mode 0666"), std::string::npos)
    << render(writable.error());
  ::chmod(item->path.c_str(), 0600);
  if (::geteuid() != 0)
    GTEST_SKIP() << "giving a file to another user needs root (CI is)";
  ASSERT_EQ(::chown(item->path.c_str(), 65534, 65534), 0); // nobody
  auto foreign = ask_loader(*item);
  ASSERT_FALSE(foreign) << "another user's item was loaded";
  EXPECT_NE(render(foreign.error()).find("belongs to uid 65534"),
            std::string::npos)
    << render(foreign.error());
}

// Someone who can write the item (this user's other processes, or anyone
// before the owner and mode checks) changes its bytes after the reference
// went out: same size, owner and mode. The reference's checksum, which only
// travels on the authenticated router, no longer matches: refused.
TEST_F(HostileRef, AnItemAlteredAfterItsReferenceWentOutIsRefused) {
  for (auto kind : {storage_kind::file, storage_kind::shm}) {
    auto so = opts_in(own);
    so.kind = kind;
    auto ref = store(so, sample_delta());
    ASSERT_TRUE(ref);
    ASSERT_NE(ref->checksum, 0u);
    ASSERT_TRUE(ask_loader(*ref)) << "unaltered: loads";
    int fd = open_for_writing(*ref);
    ASSERT_GE(fd, 0);
    // One byte in the middle of the trajectory (7 -> 8).
    char b = 0;
    auto at = static_cast<off_t>(ref->size / 2);
    ASSERT_EQ(::pread(fd, &b, 1, at), 1);
    b = static_cast<char>(b ^ 0x0F);
    ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
    ::close(fd);
    auto altered = ask_loader(*ref);
    ASSERT_FALSE(altered) << "an altered item was loaded";
    EXPECT_NE(render(altered.error()).find("checksum mismatch"),
              std::string::npos)
      << render(altered.error());
    remove_storage(*ref);
  }
}

TEST_F(HostileRef, AFifoIsRefusedWithoutBlocking) {
  auto fifo = own / "dice.9.1.2.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  storage_ref ref;
  ref.kind = storage_kind::file;
  ref.path = fifo.string();
  ref.host = this_host();
  ref.size = 0;
  auto opts = opts_in(own);
  auto done = std::async(std::launch::async, [&] {
    if (auto err = confine(ref, opts))
      return err;
    auto x = load_context(ref);
    return x ? caf::error{} : x.error();
  });
  auto status = done.wait_for(5s);
  if (status != std::future_status::ready) {
    // Unblock the reader so the test can end: open the write side.
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    ADD_FAILURE() << "loading a FIFO blocked for 5 s";
    if (fd >= 0)
      ::close(fd);
  }
  auto err = done.get();
  EXPECT_TRUE(err) << "a FIFO was loaded";
  EXPECT_NE(render(err).find("not a regular file"), std::string::npos)
    << render(err);
}

// A writer truncates the item while a reader holds it: with a shared
// mapping the reader died of SIGBUS (or saw torn bytes after a rewrite).
// The reader's bytes are its own now.
TEST_F(HostileRef, TruncatedWhileReadIsNeverTorn) {
  for (auto kind : {storage_kind::file, storage_kind::shm}) {
    auto so = opts_in(own);
    so.kind = kind;
    auto ref = store(so, sample_delta());
    ASSERT_TRUE(ref);
    EXPECT_EXIT(
      {
        std::vector<std::uint8_t> first;
        auto err = with_stored_bytes(
          *ref, [&](const std::uint8_t* data, std::size_t size) -> caf::error {
            first.assign(data, data + size);
            // The writer recycles the item: truncated, then refilled.
            int fd = open_for_writing(*ref);
            if (fd < 0 || ::ftruncate(fd, 0) != 0)
              std::_Exit(3);
            std::vector<std::uint8_t> junk(size / 2, 0xAB);
            if (::write(fd, junk.data(), junk.size()) < 0)
              std::_Exit(3);
            ::close(fd);
            // Read everything again: same bytes, no SIGBUS.
            for (std::size_t i = 0; i < size; ++i)
              if (data[i] != first[i])
                std::_Exit(4);
            return caf::none;
          });
        std::_Exit(err ? 5 : 0);
      },
      ::testing::ExitedWithCode(0), "")
      << (kind == storage_kind::shm ? "shm" : "file");
    remove_storage(*ref);
  }
}

} // namespace
