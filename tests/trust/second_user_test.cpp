// Another user on the same machine, as that user works: the test (root in
// CI) adds a real user with useradd, and that user's own processes
// (setpriv) create the spool directory first and plant a forged spool file
// for a collector's node id. The victim's collector, a real
// dice_exchange_probe node started with that --dice.spool-dir, must refuse
// the directory with a clear error and take nothing from it (before the
// fix it took the planted file as its own unacknowledged deltas). Every
// wait has a deadline.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;
using dice::test::secret_file;
namespace fs = std::filesystem;

using dice::test::bin_dir;

/// Runs `argv` to its end (60 s at most); its exit code, -1 if it did not
/// end.
int run(std::vector<std::string> argv, std::string* out = nullptr) {
  child_process p{std::move(argv)};
  auto rc = p.wait_exit(60s);
  if (out != nullptr)
    *out = p.text();
  return rc ? *rc : -1;
}

class SecondUser : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "adding a second user needs root (CI is)";
    if (!fs::exists("/usr/sbin/useradd") || !fs::exists("/usr/bin/setpriv"))
      GTEST_SKIP() << "useradd or setpriv missing";
    name_ = "dicemallory" + std::to_string(::getpid() % 100000);
    std::string out;
    ASSERT_EQ(run({"/usr/sbin/useradd", "--system", "--no-create-home",
                   "--shell", "/usr/sbin/nologin", name_},
                  &out),
              0)
      << out;
    added_ = true;
    dir_ = fs::temp_directory_path()
      / ("dice-planted-spool-" + std::to_string(::getpid()));
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (added_)
      run({"/usr/sbin/userdel", name_});
  }

  /// Runs a shell command as the second user (its own uid, gid, no
  /// supplementary groups).
  int as_mallory(const std::string& script, std::string* out = nullptr) {
    return run({"/usr/bin/setpriv", "--reuid=" + name_, "--regid=" + name_,
                "--clear-groups", "--", "/bin/sh", "-c", script},
               out);
  }

  /// Node `id` of 2 (0: the learner, on an ephemeral port; 1: the
  /// victim's collector, spooling into `dir_`).
  std::vector<std::string> node(int id, const secret_file& s,
                                std::uint16_t port = 1) {
    std::vector<std::string> args{bin_dir + "dice_exchange_probe",
                                  "--dice.node-id=" + std::to_string(id),
                                  "--dice.workers=2",
                                  "--dice.topology=star",
                                  "--dice.host=127.0.0.1",
                                  "--dice.secret-file=" + s.path,
                                  "--dice.peer-loss-timeout=10s",
                                  "--steps=5"};
    if (id == 1) {
      args.push_back("--dice.attach-to=127.0.0.1:" + std::to_string(port));
      args.push_back("--dice.spool-dir=" + dir_.string());
    }
    return args;
  }

  std::string name_;
  bool added_ = false;
  fs::path dir_;
};

// A forged segment for node 1 (an earlier incarnation), in the spool's
// file naming; its content claims what a forger would want counted.
std::string plant_script(const fs::path& dir, const char* mode) {
  return "umask 0 && mkdir -m " + std::string{mode} + " " + dir.string()
    + " && printf 'env_step 1000000' > " + dir.string()
    + "/dice-spool.1.00000000000000a1.0";
}

TEST_F(SecondUser, ASpoolDirectoryMadeFirstByAnotherUserIsRefused) {
  secret_file s{"0123456789abcdef0123456789abcdef"};
  // World-writable with the sticky bit, as under /tmp, and then the same
  // user's directory closed to others: both are another user's.
  for (auto mode : {"1777", "0755"}) {
    std::string out;
    ASSERT_EQ(as_mallory(plant_script(dir_, mode), &out), 0) << out;
    struct stat st {};
    ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
    ASSERT_NE(st.st_uid, 0u) << "the directory should be the other user's";
    child_process victim{node(1, s)};
    auto rc = victim.wait_exit(30s);
    ASSERT_TRUE(rc) << "the collector did not stop\n" << victim.text();
    EXPECT_NE(*rc, 0) << victim.text();
    EXPECT_TRUE(victim.wait_for(
      std::regex{"spool directory " + dir_.string() + " is owned by uid "
                 + std::to_string(st.st_uid)
                 + ", not this process's user \\(uid 0\\): another user "
                   "could plant files in it"},
      0ms))
      << victim.text();
    // Nothing of the planted file was taken: no republish, no delta.
    EXPECT_FALSE(victim.wait_for(std::regex{"republish|recovered"}, 0ms))
      << victim.text();
    fs::remove_all(dir_);
  }
}

TEST_F(SecondUser, CannotPlantInTheDirectoryDiceMadeItself) {
  secret_file s{"0123456789abcdef0123456789abcdef"};
  // A genuine run: the collector makes its spool directory (0700).
  child_process learner{node(0, s)};
  std::smatch m;
  ASSERT_TRUE(learner.wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
    << learner.text();
  child_process victim{
    node(1, s, static_cast<std::uint16_t>(std::stoi(m[1].str())))};
  auto rc_c = victim.wait_exit(30s);
  auto rc_l = learner.wait_exit(30s);
  ASSERT_TRUE(rc_c && rc_l) << victim.text() << learner.text();
  EXPECT_EQ(*rc_c, 0) << victim.text();
  EXPECT_EQ(*rc_l, 0) << learner.text();
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0) << victim.text();
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  std::string out;
  EXPECT_NE(as_mallory("printf forged > " + dir_.string()
                         + "/dice-spool.1.00000000000000a1.0",
                       &out),
            0)
    << "the other user wrote into dice's spool directory";
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
}

} // namespace
