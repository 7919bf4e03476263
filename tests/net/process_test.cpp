// Real processes on loopback: dice-launch and dice_exchange_probe nodes with
// ephemeral ports. Every wait has a deadline; nothing sleeps to pass.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

using dice::test::bin_dir;

/// A child process whose stdout and stderr (merged) the test reads.
using process = dice::test::child_process;

/// A node's JSON report, as far as the tests need it.
struct report {
  int node = -1;
  std::string role;
  long env_step = 0;
  long train_iter = 0;
  long model_version = -1;
  long models_loaded = 0;
  std::string stop_reason;
};

long field(const std::string& line, const std::string& name) {
  return dice::test::json_int(line, name);
}

std::string text_field(const std::string& line, const std::string& name) {
  return dice::test::json_str(line, name);
}

std::vector<report> reports(const std::vector<std::string>& lines) {
  std::vector<report> result;
  for (auto& l : lines) {
    if (l.find("\"stop_reason\"") == std::string::npos)
      continue;
    report r;
    r.node = static_cast<int>(field(l, "node"));
    r.role = text_field(l, "role");
    r.env_step = field(l, "env_step");
    r.train_iter = field(l, "train_iter");
    r.model_version = field(l, "model_version");
    r.models_loaded = field(l, "models_loaded");
    r.stop_reason = text_field(l, "stop_reason");
    result.push_back(r);
  }
  return result;
}

std::vector<std::string> node_args(int id, int workers,
                                   const std::string& attach,
                                   std::vector<std::string> extra) {
  std::vector<std::string> args{bin_dir + "dice_exchange_probe",
                                "--dice.node-id=" + std::to_string(id),
                                "--dice.workers=" + std::to_string(workers),
                                "--dice.topology=star",
                                "--dice.host=127.0.0.1",
                                "--dice.peer-loss-timeout=10s"};
  if (!attach.empty())
    args.push_back("--dice.attach-to=" + attach);
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const std::regex port_line{"dice-node 0 listening on port ([0-9]+)"};

TEST(Process, LaunchThreeWorkersSumsEnvStep) {
  auto t0 = clock_type::now();
  process launch{{bin_dir + "dice-launch", "--workers", "3", "--",
                  bin_dir + "dice_exchange_probe", "--steps=20"}};
  auto rc = launch.wait_exit(30s);
  ASSERT_TRUE(rc) << "dice-launch did not end within 30 s\n" << launch.text();
  EXPECT_EQ(*rc, 0) << launch.text();
  auto reps = reports(launch.lines());
  ASSERT_EQ(reps.size(), 3u) << launch.text();
  long learner = -1;
  long collectors = 0;
  int n_collectors = 0;
  for (auto& r : reps) {
    if (r.role == "learner")
      learner = r.env_step;
    if (r.role == "collector") {
      collectors += r.env_step;
      ++n_collectors;
    }
  }
  EXPECT_EQ(n_collectors, 1) << launch.text();
  EXPECT_GT(learner, 0) << launch.text();
  EXPECT_EQ(learner, collectors) << launch.text();
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::cout << "3-node run took " << secs << " s" << std::endl;
}

TEST(Process, FinishFromACollectorEndsEveryNode) {
  // The learner would run (almost) forever; a collector's max_step ends it.
  process launch{{bin_dir + "dice-launch", "--workers", "4", "--topology",
                  "star", "--", bin_dir + "dice_exchange_probe",
                  "--steps=100000000", "--collector-steps=30"}};
  std::smatch m;
  ASSERT_TRUE(launch.wait_for(std::regex{"\"stop_reason\":\"max_step\""}, 30s))
    << launch.text();
  auto finished_at = clock_type::now();
  auto rc = launch.wait_exit(10s);
  ASSERT_TRUE(rc) << "not every node stopped within 10 s of the finish\n"
                  << launch.text();
  auto secs = std::chrono::duration<double>(clock_type::now() - finished_at)
                .count();
  std::cout << "all nodes stopped " << secs << " s after the finish"
            << std::endl;
  EXPECT_EQ(*rc, 0) << launch.text();
  EXPECT_EQ(reports(launch.lines()).size(), 4u) << launch.text();
}

TEST(Process, KilledCollectorIsDetectedAndRejoins) {
  process learner{node_args(0, 4, "", {"--steps=100000000"})};
  std::smatch m;
  ASSERT_TRUE(learner.wait_for(port_line, 20s, &m)) << learner.text();
  auto attach = "127.0.0.1:" + m[1].str();
  process evaluator{node_args(1, 4, attach, {})};
  process c2{node_args(2, 4, attach, {})};
  std::optional<process> c3;
  c3.emplace(node_args(3, 4, attach, {}));
  ASSERT_TRUE(learner.wait_for(std::regex{"3 peer\\(s\\) connected"}, 20s))
    << learner.text();
  // Mid-run: the collector has received at least one model.
  ASSERT_TRUE(c3->wait_for(std::regex{"connected to peer node 0"}, 10s));
  c3->kill(SIGKILL);
  auto killed_at = clock_type::now();
  ASSERT_TRUE(
    learner.wait_for(std::regex{"lost peer node 3 \\(collector\\)"}, 10s))
    << learner.text();
  auto detect = std::chrono::duration<double>(clock_type::now() - killed_at);
  std::cout << "killed peer detected after " << detect.count() << " s"
            << std::endl;
  EXPECT_LT(detect.count(), 5.0);
  c3->wait_exit(1s);
  // The restarted collector rejoins, runs 20 iterations on the current
  // model, and its finish ends the whole run.
  c3.emplace(node_args(3, 4, attach, {"--collector-steps=20"}));
  auto rc3 = c3->wait_exit(30s);
  ASSERT_TRUE(rc3) << c3->text();
  auto finished_at = clock_type::now();
  EXPECT_EQ(*rc3, 0) << c3->text();
  for (auto* p : {&learner, &evaluator, &c2}) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      finished_at + 10s - clock_type::now());
    auto rc = p->wait_exit(std::max(left, 1ms));
    ASSERT_TRUE(rc) << "a node did not stop within 10 s\n" << p->text();
    EXPECT_EQ(*rc, 0) << p->text();
  }
  auto rep3 = reports(c3->lines());
  ASSERT_EQ(rep3.size(), 1u) << c3->text();
  // It got the learner's latest model and train_iter (retained by the
  // learner's router and sent in the handshake).
  EXPECT_GT(rep3[0].models_loaded, 0) << c3->text();
  EXPECT_GT(rep3[0].model_version, 0) << c3->text();
  EXPECT_GT(rep3[0].train_iter, 0) << c3->text();
  auto rep0 = reports(learner.lines());
  ASSERT_EQ(rep0.size(), 1u) << learner.text();
  EXPECT_GT(rep0[0].env_step, 0);
}

} // namespace
