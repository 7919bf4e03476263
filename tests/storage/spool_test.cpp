// The context spool's files (storage/context_spool.cpp), without actors:
// what one incarnation appended is what the next one recovers, a record cut
// short by a kill is dropped, settled deltas are not recovered and their
// files go, and files that are not this node's (or lie) are left alone.

#include "dice/security/auth.hpp"
#include "storage/context_spool.hpp"

#include "support/files.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

using namespace dice;
namespace fs = std::filesystem;

namespace {

context_delta delta(std::uint32_t node, std::uint64_t incarnation,
                    std::uint64_t seq, std::int64_t steps = 16) {
  context_delta d;
  d.sender = node;
  d.incarnation = incarnation;
  d.seq = seq;
  d.base = seq;
  d.sender_roles = {role::collector};
  d.env_step = steps;
  d.env_episode = 1;
  d.trajectories = {
    pack(std::vector<int>(static_cast<std::size_t>(steps), 7), node)};
  d.trajectory_end_idx = {steps - 1};
  d.has_trajectory_end_idx = true;
  return d;
}

std::unique_ptr<context_spool>
open_spool(const fs::path& dir, std::uint32_t node, std::uint64_t incarnation,
           std::size_t segment_bytes = 0, const std::string& key = {}) {
  context_spool_options opts;
  opts.dir = dir.string();
  opts.node = node;
  opts.incarnation = incarnation;
  opts.key = key;
  if (segment_bytes > 0)
    opts.segment_bytes = segment_bytes;
  auto result = context_spool::open(opts);
  EXPECT_TRUE(result) << (result ? "" : to_string(result.error()));
  return result ? std::move(*result) : nullptr;
}

std::set<std::string> names(const fs::path& dir) {
  std::set<std::string> result;
  for (auto& e : fs::directory_iterator{dir})
    result.insert(e.path().filename().string());
  return result;
}

std::vector<std::uint64_t> seqs(const spooled_incarnation& x) {
  std::vector<std::uint64_t> result;
  for (auto& d : x.deltas)
    result.push_back(d.seq);
  return result;
}

TEST(ContextSpool, WhatOneIncarnationAppendedTheNextRecoversAsItWas) {
  test::scratch tmp{"spool_roundtrip"};
  {
    auto first = open_spool(tmp.dir, 3, 0xA);
    ASSERT_TRUE(first);
    EXPECT_TRUE(first->take_recovered().empty());
    for (std::uint64_t s = 1; s <= 5; ++s)
      ASSERT_FALSE(first->append(delta(3, 0xA, s)));
    ASSERT_FALSE(first->settle(0xA, 2)); // acked 1..2
    // Destroyed without removing anything: like kill -9, the files stay.
  }
  auto second = open_spool(tmp.dir, 3, 0xB);
  ASSERT_TRUE(second);
  auto rec = second->take_recovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].incarnation, 0xAu);
  EXPECT_EQ(seqs(rec[0]), (std::vector<std::uint64_t>{3, 4, 5}));
  EXPECT_EQ(rec[0].deltas[0], delta(3, 0xA, 3)) << "field for field";
  EXPECT_TRUE(second->refused().empty());
  EXPECT_TRUE(second->take_recovered().empty()) << "handed over once";
}

TEST(ContextSpool, ARecordCutShortByAKillIsDropped) {
  test::scratch tmp{"spool_torn"};
  fs::path file;
  {
    auto first = open_spool(tmp.dir, 3, 0xA);
    for (std::uint64_t s = 1; s <= 3; ++s)
      ASSERT_FALSE(first->append(delta(3, 0xA, s)));
    ASSERT_EQ(first->files(), 1u);
    file = tmp.dir / *names(tmp.dir).begin();
  }
  // A kill in the middle of the third write(2): its tail never made it.
  auto full = fs::file_size(file);
  fs::resize_file(file, full - 10);
  {
    auto second = open_spool(tmp.dir, 3, 0xB);
    auto rec = second->take_recovered();
    ASSERT_EQ(rec.size(), 1u);
    EXPECT_EQ(seqs(rec[0]), (std::vector<std::uint64_t>{1, 2}));
    // Cut back to the last whole record, so what it appends stays readable.
    EXPECT_LT(fs::file_size(file), full - 10);
    ASSERT_FALSE(second->settle(0xA, 1));
  }
  auto third = open_spool(tmp.dir, 3, 0xC);
  auto rec = third->take_recovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(seqs(rec[0]), (std::vector<std::uint64_t>{2}))
    << "the settled mark written after the torn record was cut off counts";
}

TEST(ContextSpool, AFlippedByteEndsWhatIsReadFromItsRecordOn) {
  test::scratch tmp{"spool_corrupt"};
  fs::path file;
  std::uint64_t second_at = 0;
  {
    auto first = open_spool(tmp.dir, 3, 0xA);
    ASSERT_FALSE(first->append(delta(3, 0xA, 1)));
    second_at = first->segment_size();
    ASSERT_FALSE(first->append(delta(3, 0xA, 2)));
    ASSERT_FALSE(first->append(delta(3, 0xA, 3)));
    file = tmp.dir / *names(tmp.dir).begin();
  }
  {
    std::fstream f{file, std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(static_cast<std::streamoff>(second_at + 40));
    f.put('\x5a');
  }
  auto second = open_spool(tmp.dir, 3, 0xB);
  auto rec = second->take_recovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(seqs(rec[0]), (std::vector<std::uint64_t>{1}));
}

TEST(ContextSpool, RecordsWrittenWithoutTheClusterSecretAreRefused) {
  // This user's other process (no cluster secret) writes a well-formed
  // spool for node 3 claiming 1,000,000 env steps, and appends a forged
  // record to a genuine one. Before: both were republished as node 3's.
  auto key = dice::spool_key("0123456789abcdef0123456789abcdef");
  test::scratch tmp{"spool_forged"};
  auto forged_dir = tmp.dir / "forged";
  auto genuine_dir = tmp.dir / "genuine";
  fs::create_directories(forged_dir);
  fs::create_directories(genuine_dir);
  ::chmod(forged_dir.c_str(), 0700);
  ::chmod(genuine_dir.c_str(), 0700);
  std::uint64_t forged_third_at = 0;
  {
    auto forger = open_spool(forged_dir, 3, 0xA, 0, "");
    ASSERT_FALSE(forger->append(delta(3, 0xA, 1, 1000000)));
    ASSERT_FALSE(forger->append(delta(3, 0xA, 2, 1000000)));
    forged_third_at = forger->segment_size();
    ASSERT_FALSE(forger->append(delta(3, 0xA, 3, 1000000)));
    auto genuine = open_spool(genuine_dir, 3, 0xA, 0, key);
    ASSERT_FALSE(genuine->append(delta(3, 0xA, 1)));
    ASSERT_FALSE(genuine->append(delta(3, 0xA, 2)));
  }
  auto forged_file = forged_dir / *names(forged_dir).begin();
  auto genuine_file = genuine_dir / *names(genuine_dir).begin();
  auto genuine_size = fs::file_size(genuine_file);
  {
    // The forger's third record, appended to the genuine segment.
    std::ifstream in{forged_file, std::ios::binary};
    std::string bytes{std::istreambuf_iterator<char>(in), {}};
    std::ofstream out{genuine_file, std::ios::binary | std::ios::app};
    out << bytes.substr(forged_third_at);
  }
  // The victim (with the secret) opens both spools.
  auto victim = open_spool(forged_dir, 3, 0xC, 0, key);
  ASSERT_TRUE(victim);
  EXPECT_TRUE(victim->take_recovered().empty()) << "a forged file";
  ASSERT_EQ(victim->refused().size(), 1u);
  EXPECT_NE(victim->refused()[0].find("without the cluster secret"),
            std::string::npos)
    << victim->refused()[0];
  auto owner = open_spool(genuine_dir, 3, 0xC, 0, key);
  ASSERT_TRUE(owner);
  auto rec = owner->take_recovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(seqs(rec[0]), (std::vector<std::uint64_t>{1, 2}))
    << "the forged record appended to a genuine segment is dropped";
  EXPECT_EQ(rec[0].deltas[1], delta(3, 0xA, 2));
  EXPECT_EQ(fs::file_size(genuine_file), genuine_size)
    << "cut back at the forged record's offset";
}

TEST(ContextSpool, RepublishedThenAcknowledgedLeavesNothingBehind) {
  test::scratch tmp{"spool_ack"};
  {
    auto first = open_spool(tmp.dir, 3, 0xA);
    for (std::uint64_t s = 1; s <= 4; ++s)
      ASSERT_FALSE(first->append(delta(3, 0xA, s)));
  }
  {
    auto second = open_spool(tmp.dir, 3, 0xB);
    ASSERT_EQ(second->take_recovered().size(), 1u);
    ASSERT_FALSE(second->append(delta(3, 0xB, 1)));
    EXPECT_EQ(second->files(), 2u);
    // The learner acknowledges the old stream in two steps, then the new.
    ASSERT_FALSE(second->settle(0xA, 2));
    EXPECT_EQ(second->files(), 2u);
    ASSERT_FALSE(second->settle(0xA, 4));
    EXPECT_EQ(second->files(), 1u) << "the old incarnation's file is gone";
    ASSERT_FALSE(second->settle(0xB, 1));
  }
  // Everything was settled: a third incarnation finds nothing to resend,
  // and clears the settled file away.
  auto third = open_spool(tmp.dir, 3, 0xC);
  EXPECT_TRUE(third->take_recovered().empty());
  EXPECT_TRUE(names(tmp.dir).empty());
  third->remove_all();
}

TEST(ContextSpool, SegmentsStayBoundedByWhatIsUnsettled) {
  test::scratch tmp{"spool_rotate"};
  std::size_t peak = 0;
  {
    auto s = open_spool(tmp.dir, 3, 0xA, 4096);
    // A window of 4: the learner acknowledges each delta 4 later.
    for (std::uint64_t k = 1; k <= 200; ++k) {
      ASSERT_FALSE(s->append(delta(3, 0xA, k)));
      if (k > 4) {
        ASSERT_FALSE(s->settle(0xA, k - 4));
      }
      peak = std::max(peak, s->segment_size());
      EXPECT_LE(s->files(), 1u);
    }
  }
  EXPECT_LT(peak, 4096u + 2048u);
  auto next = open_spool(tmp.dir, 3, 0xB);
  auto rec = next->take_recovered();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(seqs(rec[0]), (std::vector<std::uint64_t>{197, 198, 199, 200}));
}

TEST(ContextSpool, FilesThatAreNotThisNodesAreLeftAloneWithAReason) {
  test::scratch tmp{"spool_foreign"};
  // Another node's spool (a shared directory), a stranger's file, a file
  // with a spool name but other bytes, and one whose deltas name another
  // sender than its name and header do.
  {
    auto other = open_spool(tmp.dir, 4, 0xA);
    ASSERT_FALSE(other->append(delta(4, 0xA, 1)));
  }
  std::ofstream{tmp.dir / "notes.txt"} << "hello";
  std::ofstream{tmp.dir / "dice-spool.3.00000000000000aa.0"}
    << "not a spool at all, but long enough for a header";
  // 0600 as dice writes them, so that its bytes are what is refused.
  fs::permissions(tmp.dir / "dice-spool.3.00000000000000aa.0",
                  fs::perms::owner_read | fs::perms::owner_write);
  {
    auto liar = open_spool(tmp.dir / "liar", 3, 0xBB);
    ASSERT_FALSE(liar->append(delta(3, 0xBB, 1)));
    // A delta in node 2's name in node 3's spool: never republished.
    ASSERT_FALSE(liar->append(delta(2, 0xBB, 2)));
  }
  for (auto& e : fs::directory_iterator{tmp.dir / "liar"})
    fs::rename(e.path(), tmp.dir / e.path().filename());
  fs::remove(tmp.dir / "liar");
  auto before = names(tmp.dir);
  auto mine = open_spool(tmp.dir, 3, 0xC);
  ASSERT_TRUE(mine);
  EXPECT_TRUE(mine->take_recovered().empty());
  auto refused = mine->refused();
  ASSERT_EQ(refused.size(), 4u);
  auto says = [&](const std::string& what) {
    for (auto& r : refused)
      if (r.find(what) != std::string::npos)
        return true;
    return false;
  };
  EXPECT_TRUE(says("belongs to node 4"));
  EXPECT_TRUE(says("notes.txt: not a spool file"));
  EXPECT_TRUE(says("not a dice spool file"));
  EXPECT_TRUE(says("a delta of node 2"));
  EXPECT_EQ(names(tmp.dir), before) << "nothing was removed";
  // The next incarnation of node 4 still gets its own.
  auto four = open_spool(tmp.dir, 4, 0xD);
  EXPECT_EQ(four->take_recovered().size(), 1u);
}

TEST(ContextSpool, ALiveIncarnationsFilesAreNotTakenOver) {
  test::scratch tmp{"spool_live"};
  auto running = open_spool(tmp.dir, 3, 0xA);
  ASSERT_FALSE(running->append(delta(3, 0xA, 1)));
  // A second process with the same node id (or a role actor restarted in
  // this one while the old spool is still open) must not republish them.
  auto other = open_spool(tmp.dir, 3, 0xB);
  EXPECT_TRUE(other->take_recovered().empty());
  ASSERT_EQ(other->refused().size(), 1u);
  EXPECT_NE(other->refused()[0].find("live process"), std::string::npos);
  running.reset();
  auto after = open_spool(tmp.dir, 3, 0xC);
  EXPECT_EQ(after->take_recovered().size(), 1u);
}

TEST(ContextSpool, AnUnusableDirectoryIsAnError) {
  test::scratch tmp{"spool_unusable"};
  std::ofstream{tmp.dir / "file"} << "x";
  context_spool_options opts;
  opts.dir = (tmp.dir / "file").string();
  opts.node = 3;
  opts.incarnation = 1;
  EXPECT_FALSE(context_spool::open(opts));
  opts.dir = "";
  EXPECT_FALSE(context_spool::open(opts));
}

// -- a directory and files another user could have planted -------------------

std::string open_error(const fs::path& dir) {
  context_spool_options opts;
  opts.dir = dir.string();
  opts.node = 3;
  opts.incarnation = 0xE;
  auto got = context_spool::open(opts);
  return got ? std::string{} : to_string(got.error());
}

TEST(ContextSpool, ADirectoryOthersCanWriteIsRefused) {
  // A local attacker's move: create the victim's spool directory first, in
  // /tmp, writable by everyone, and put a forged segment in it.
  test::scratch tmp{"spool_planted_dir"};
  auto dir = tmp.dir / "spool";
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::all | fs::perms::sticky_bit);
  auto err = open_error(dir);
  EXPECT_NE(err.find("has mode 1777"), std::string::npos) << err;
  EXPECT_NE(err.find(dir.string()), std::string::npos) << err;
  fs::permissions(
    dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  EXPECT_EQ(open_error(dir), "") << "0750 is this user's alone";
  // A symbolic link to a directory: refused, whatever it points at.
  fs::create_directory_symlink(dir, tmp.dir / "link");
  err = open_error(tmp.dir / "link");
  EXPECT_NE(err.find("symbolic link"), std::string::npos) << err;
}

TEST(ContextSpool, ADirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "giving a directory to another user needs root (CI is)";
  test::scratch tmp{"spool_foreign_dir"};
  auto dir = tmp.dir / "spool";
  fs::create_directory(dir);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0); // nobody
  auto err = open_error(dir);
  EXPECT_NE(err.find("owned by uid 65534"), std::string::npos) << err;
}

TEST(ContextSpool, PlantedSegmentsAreLeftAloneWithAReason) {
  // Two real segments of an earlier incarnation of node 3, as a forger
  // would copy and edit them: one given to another user, one made
  // readable and writable by others. Neither is republished.
  test::scratch tmp{"spool_planted_files"};
  {
    auto a = open_spool(tmp.dir / "a", 3, 0xA);
    ASSERT_FALSE(a->append(delta(3, 0xA, 1, 1000000)));
    auto b = open_spool(tmp.dir / "b", 3, 0xB);
    ASSERT_FALSE(b->append(delta(3, 0xB, 1, 1000000)));
  }
  auto move_in = [&](const fs::path& from) {
    std::vector<fs::path> moved;
    for (auto& e : fs::directory_iterator{from}) {
      moved.push_back(tmp.dir / "spool" / e.path().filename());
      fs::rename(e.path(), moved.back());
    }
    return moved;
  };
  fs::create_directory(tmp.dir / "spool");
  auto a_files = move_in(tmp.dir / "a");
  auto b_files = move_in(tmp.dir / "b");
  for (auto& f : a_files)
    fs::permissions(f,
                    fs::perms::owner_read | fs::perms::owner_write
                      | fs::perms::group_read | fs::perms::group_write
                      | fs::perms::others_read | fs::perms::others_write);
  bool as_root = ::geteuid() == 0;
  if (as_root)
    for (auto& f : b_files)
      ASSERT_EQ(::chown(f.c_str(), 65534, 65534), 0);
  auto mine = open_spool(tmp.dir / "spool", 3, 0xC);
  ASSERT_TRUE(mine);
  auto rec = mine->take_recovered();
  auto refused = mine->refused();
  auto says = [&](const std::string& what) {
    for (auto& r : refused)
      if (r.find(what) != std::string::npos)
        return true;
    return false;
  };
  EXPECT_TRUE(says("mode 0666: group or others may have written it"));
  if (as_root) {
    EXPECT_TRUE(rec.empty()) << "a planted delta was taken as this node's";
    EXPECT_TRUE(says("owned by uid 65534"));
  } else {
    ASSERT_EQ(rec.size(), 1u); // only 0xB's, which is this user's
    EXPECT_EQ(rec[0].incarnation, 0xBu);
  }
}

} // namespace
