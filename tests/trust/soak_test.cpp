// Soak: 1 learner, 1 evaluator and 6 collectors (dice_exchange_probe) as real
// processes through dice-launch, for DICE_SOAK_SECONDS (default 60). The
// learner's resident memory is sampled every second and must stay flat
// (within 10 % after warm-up); at the end every transition the collectors
// produced arrived at the learner exactly once. Every wait has a deadline.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include "support/secret_file.hpp"
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;
using clock_type = std::chrono::steady_clock;

using dice::test::bin_dir;

/// Resident memory of `pid` in KiB (-1: gone).
long rss_kib(pid_t pid) {
  std::ifstream f{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

/// The child of `parent` whose command line contains `needle` (-1: none).
pid_t child_with(pid_t parent, const std::string& needle) {
  auto* dir = ::opendir("/proc");
  if (dir == nullptr)
    return -1;
  pid_t found = -1;
  while (auto* e = ::readdir(dir)) {
    char* end = nullptr;
    auto pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0)
      continue;
    std::ifstream stat{"/proc/" + std::string{e->d_name} + "/stat"};
    std::string all{std::istreambuf_iterator<char>{stat}, {}};
    // Fields after the ")" that ends the command name: state, ppid, ...
    auto close = all.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream rest{all.substr(close + 1)};
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent)
      continue;
    std::ifstream cmd{"/proc/" + std::string{e->d_name} + "/cmdline"};
    std::string args{std::istreambuf_iterator<char>{cmd}, {}};
    std::replace(args.begin(), args.end(), '\0', ' ');
    if (args.find(needle) != std::string::npos) {
      found = static_cast<pid_t>(pid);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

struct report {
  long node = -1;
  std::string role;
  long env_step = 0;
  long trajectories_received = 0;
  long deltas_received = 0;
};

std::vector<report> reports(const std::vector<std::string>& lines) {
  std::vector<report> result;
  for (auto& l : lines) {
    if (l.find("\"stop_reason\"") == std::string::npos)
      continue;
    report r;
    r.node = dice::test::json_int(l, "node");
    r.role = dice::test::json_str(l, "role");
    r.env_step = dice::test::json_int(l, "env_step");
    r.trajectories_received = dice::test::json_int(l, "trajectories_received");
    r.deltas_received = dice::test::json_int(l, "deltas_received");
    result.push_back(r);
  }
  return result;
}

long soak_seconds() {
  if (auto* x = std::getenv("DICE_SOAK_SECONDS"))
    if (auto n = std::atol(x); n > 0)
      return n;
  return 60;
}

TEST(Soak, LearnerMemoryStaysFlatAndNothingIsLostOrDoubled) {
  auto secs = soak_seconds();
  // The learner would run for ever; a late ninth node with one collector
  // iteration ends the run when the soak time is up.
  // The finisher joins from outside the launch: it needs the same secret.
  dice::test::secret_file secret;
  child_process launch{{bin_dir + "dice-launch", "--workers", "8", "--topology",
                        "star", secret.flag(), "--",
                        bin_dir + "dice_exchange_probe", "--steps=1000000000",
                        "--dice.peer-loss-timeout=20s"}};
  std::smatch m;
  ASSERT_TRUE(launch.wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 60s, &m))
    << launch.text();
  auto port = m[1].str();
  ASSERT_TRUE(launch.wait_for(std::regex{"7 peer\\(s\\) connected"}, 60s))
    << launch.text();
  auto learner = child_with(launch.pid(), "--dice.node-id=0 ");
  ASSERT_GT(learner, 0) << "cannot find the learner process";
  std::vector<long> samples;
  auto next = clock_type::now();
  const std::regex nothing{"(?!x)x"};
  for (long i = 0; i < secs; ++i) {
    next += 1s;
    // Reads (and so drains) the nodes' output until the next sample is due.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      next - clock_type::now());
    launch.wait_for(nothing, std::max(left, 0ms));
    auto rss = rss_kib(learner);
    ASSERT_GT(rss, 0) << "the learner is gone after " << i << " s\n"
                      << launch.text();
    samples.push_back(rss);
  }
  child_process finisher{
    {bin_dir + "dice_exchange_probe", "--dice.node-id=8", "--dice.workers=8",
     "--dice.topology=star", "--dice.attach-to=127.0.0.1:" + port,
     "--dice.host=127.0.0.1", secret.flag(), "--collector-steps=1"}};
  auto rc = launch.wait_exit(60s);
  ASSERT_TRUE(rc) << "the cluster did not stop within 60 s of the finish\n"
                  << launch.text();
  EXPECT_EQ(*rc, 0) << launch.text();
  auto frc = finisher.wait_exit(30s);
  ASSERT_TRUE(frc) << finisher.text();
  EXPECT_EQ(*frc, 0) << finisher.text();
  auto all = reports(launch.lines());
  for (auto& r : reports(finisher.lines()))
    all.push_back(r);
  ASSERT_EQ(all.size(), 9u) << launch.text() << finisher.text();
  long produced = 0;
  long received = -1;
  long learner_steps = -1;
  long deltas = -1;
  int collectors = 0;
  for (auto& r : all) {
    if (r.role == "collector") {
      produced += r.env_step;
      ++collectors;
    } else if (r.role == "learner") {
      received = r.trajectories_received;
      learner_steps = r.env_step;
      deltas = r.deltas_received;
    }
  }
  EXPECT_EQ(collectors, 7);
  EXPECT_GT(produced, 0);
  // Exactly once: one more or one less transition fails.
  EXPECT_EQ(received, produced) << launch.text();
  EXPECT_EQ(learner_steps, produced);
  // Memory: flat within 10 % once warmed up (first third, at least 10 s).
  auto warm = std::max<std::size_t>(10, samples.size() / 3);
  ASSERT_GT(samples.size(), warm + 5) << "soak too short for a verdict";
  auto lo = *std::min_element(samples.begin() + warm, samples.end());
  auto hi = *std::max_element(samples.begin() + warm, samples.end());
  auto peak = *std::max_element(samples.begin(), samples.end());
  std::cout << "soak " << secs << " s: transitions produced " << produced
            << ", received " << received << ", deltas " << deltas
            << "; learner RSS after warm-up " << lo << ".." << hi
            << " KiB, peak " << peak << " KiB" << std::endl;
  EXPECT_LE(static_cast<double>(hi), 1.10 * static_cast<double>(lo))
    << "learner RSS grew from " << lo << " to " << hi << " KiB";
}

} // namespace
