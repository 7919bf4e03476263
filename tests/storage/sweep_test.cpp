// What a killed dice process leaves in /dev/shm is swept by the next start:
// only plain files named as dice names its segments, owned by this user,
// not written for a while, of a process that no longer runs.

#include "dice/storage/storage.hpp"

#include "support/child_process.hpp"
#include "support/files.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A process id that ran and is gone (forked, exited, reaped).
pid_t dead_pid() {
  auto pid = ::fork();
  if (pid == 0)
    ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// Writes `path` and dates it an hour back.
void make_old(const fs::path& path) {
  std::ofstream{path} << "segment";
  timespec old[2];
  old[0].tv_sec = old[1].tv_sec = ::time(nullptr) - 3600;
  old[0].tv_nsec = old[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old, 0), 0);
}

TEST(SweepDeadSegments, RemovesOnlyOldSegmentsOfDeadProcessesOfThisUser) {
  dice::test::scratch dir{"dice_sweep"};
  auto dead = std::to_string(dead_pid());
  auto me = std::to_string(::getpid());
  auto at = [&](const std::string& name) {
    return dir.dir / name;
  };
  // Swept: a node's segment and a pool segment of the dead process.
  make_old(at("dice.3." + dead + ".0123456789abcdef.7"));
  make_old(at("dice.pool." + dead + ".0123456789abcdef.2"));
  // Kept: this process's, pid 1's (running), a fresh one of the dead
  // process (a reader may still want it), other names, a directory and a
  // symlink with a dead process's name.
  make_old(at("dice.3." + me + ".0123456789abcdef.1"));
  make_old(at("dice.3.1.0123456789abcdef.1"));
  std::ofstream{at("dice.4." + dead + ".0123456789abcdef.9")} << "fresh";
  make_old(at("dice.3.notapid.0123456789abcdef.1"));
  make_old(at("other.3." + dead + ".0123456789abcdef.1"));
  fs::create_directory(at("dice.5." + dead + ".0123456789abcdef.1"));
  fs::create_symlink(at("dice.3.1.0123456789abcdef.1"),
                     at("dice.6." + dead + ".0123456789abcdef.1"));
  EXPECT_EQ(dice::sweep_dead_segments(dir.dir.string()), 2u);
  EXPECT_FALSE(fs::exists(at("dice.3." + dead + ".0123456789abcdef.7")));
  EXPECT_FALSE(fs::exists(at("dice.pool." + dead + ".0123456789abcdef.2")));
  for (const std::string& name : std::vector<std::string>{
         "dice.3." + me + ".0123456789abcdef.1", "dice.3.1.0123456789abcdef.1",
         "dice.4." + dead + ".0123456789abcdef.9",
         "dice.3.notapid.0123456789abcdef.1",
         "other.3." + dead + ".0123456789abcdef.1",
         "dice.5." + dead + ".0123456789abcdef.1"})
    EXPECT_TRUE(fs::exists(at(name))) << name;
  EXPECT_TRUE(fs::is_symlink(at("dice.6." + dead + ".0123456789abcdef.1")));
  // Nothing left to sweep a second time.
  EXPECT_EQ(dice::sweep_dead_segments(dir.dir.string()), 0u);
}

TEST(SweepDeadSegments, ANodesStartSweepsWhatAKilledRunLeftInDevShm) {
  // A segment as a collector killed with kill -9 an hour ago left it.
  auto name = "dice.2." + std::to_string(dead_pid()) + ".00000000deadbeef.1";
  auto path = fs::path{"/dev/shm"} / name;
  auto fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ::close(fd);
  make_old(path);
  dice::test::child_process run{
    {std::string{DICE_BINARY_DIR} + "/bin/dice_exchange_probe", "--steps=2",
     "--collectors=1"}};
  auto rc = run.wait_exit(60s);
  ASSERT_TRUE(rc) << run.text();
  EXPECT_EQ(*rc, 0) << run.text();
  EXPECT_FALSE(fs::exists(path)) << run.text();
  EXPECT_TRUE(run.wait_for(
    std::regex{"removed [0-9]+ shared-memory segment\\(s\\) that dead dice "
               "processes left"},
    1s))
    << run.text();
  ::shm_unlink(("/" + name).c_str());
}

} // namespace
