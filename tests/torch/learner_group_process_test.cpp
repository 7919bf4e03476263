// The learner group across real processes on loopback: this binary started
// again with --learner-worker is one learner. Rank 0 hosts the store on an
// ephemeral port; ranks print JSON lines; a kill -9 is a real SIGKILL.
// Every wait has a deadline; nothing sleeps.

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"
#include "torch/learner_group_shm.hpp"
#include "torch/learner_group_support.hpp"

#include "support/child_process.hpp"
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using dice::learner_group;
using dice::learner_group_config;
using dice::test::child_process;
using dice::test::json_int;
using dice::test::json_num;
using dice::test::json_str;

// -- the worker (one learner process) -----------------------------------------

std::string arg(int argc, char** argv, const std::string& name,
                const std::string& fallback = "") {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + name)
      return argv[i + 1];
  return fallback;
}

long num(int argc, char** argv, const std::string& name, long fallback) {
  return std::stol(arg(argc, argv, name, std::to_string(fallback)));
}

// CLOCK_MONOTONIC in ns: comparable between processes of one machine.
long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           clock_type::now().time_since_epoch())
    .count();
}

std::string hex(std::uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, x);
  return buf;
}

// One line from the control pipe, or "" at the deadline.
std::string read_line(int fd, std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  std::string line;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock_type::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return {};
    char c;
    if (::read(fd, &c, 1) != 1)
      return {};
    if (c == '\n')
      return line;
    line += c;
  }
}

int worker_main(int argc, char** argv) {
  torch::set_num_threads(1);
  learner_group_config cfg;
  cfg.rank = static_cast<int>(num(argc, argv, "rank", 0));
  cfg.size = static_cast<int>(num(argc, argv, "size", 2));
  cfg.store_port = static_cast<std::uint16_t>(num(argc, argv, "port", 0));
  cfg.timeout = std::chrono::milliseconds{num(argc, argv, "timeout-ms", 5000)};
  cfg.join_timeout = 30s;
  auto mode = arg(argc, argv, "mode");
  cfg.mode = mode == "flat" ? dice::reduce_mode::flat
    : mode == "exchange"    ? dice::reduce_mode::exchange
                            : dice::reduce_mode::bucketed;
  cfg.shared_memory = num(argc, argv, "shared-memory", 1) != 0;
  cfg.bucket_bytes = 2048;
  auto steps = num(argc, argv, "steps", 6);
  auto after = num(argc, argv, "after", 4);
  auto control = static_cast<int>(num(argc, argv, "control-fd", -1));
  auto dump = arg(argc, argv, "dump");
  // One JSON line per event; the test waits for them by pattern, so the
  // fields keep this order.
  auto say = [](const nlohmann::ordered_json& line) {
    std::printf("%s\n",
                line
                  .dump(-1, ' ', false,
                        nlohmann::ordered_json::error_handler_t::replace)
                  .c_str());
    std::fflush(stdout);
  };
  auto formed = [&](learner_group& g, double ms) {
    say({{"event", "formed"},
         {"generation", g.generation()},
         {"rank", g.rank()},
         {"size", g.size()},
         {"ms", ms}});
  };
  auto ms_since = [](clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0)
      .count();
  };
  auto g = learner_group::create(cfg);
  if (!g) {
    say({{"event", "error"}, {"error", dice::render(g.error())}});
    return 2;
  }
  if (cfg.rank == 0)
    say({{"event", "listening"}, {"generation", 0}, {"port", g->store_port()}});
  auto t0 = clock_type::now();
  if (auto err = g->join()) {
    say({{"event", "error"}, {"error", dice::render(err)}});
    return 3;
  }
  formed(*g, ms_since(t0));
  auto net = dice::test::make_net(10 + cfg.rank); // ranks start different
  torch::optim::Adam opt{net->parameters(), torch::optim::AdamOptions(1e-2)};
  if (g->broadcast_parameters(*net) || g->broadcast_optimizer(opt))
    return 4;
  auto step_line = [&](learner_group& grp, long step) {
    say({{"event", "step"},
         {"generation", grp.generation()},
         {"step", step},
         {"digest", hex(*dice::parameters_digest(*net))}});
  };
  long done = 0;
  caf::error failure;
  for (long s = 1; s <= steps; ++s) {
    if ((failure = dice::test::train_step(*g, net, opt, cfg.rank,
                                          static_cast<int>(s))))
      break;
    ++done;
    if (s <= 10)
      step_line(*g, s);
  }
  learner_group* current = &*g;
  caf::expected<learner_group> ng{caf::error{}};
  if (failure) {
    auto failed_at = clock_type::now();
    say({{"event", "failed"},
         {"step", done + 1},
         {"t_ns", now_ns()},
         {"errc",
          dice::is(failure, dice::errc::timeout) ? "timeout" : "unreachable"},
         {"error", dice::render(failure)}});
    // The test tells the survivors who is left, then the new rank 0's port.
    std::istringstream line{read_line(control, 60s)};
    std::string word;
    line >> word;
    if (word != "survivors")
      return 5;
    std::vector<int> survivors{std::istream_iterator<int>{line}, {}};
    auto next = learner_group::next_generation(cfg, survivors);
    if (!next)
      return 6;
    if (next->rank == 0) {
      ng = learner_group::create(*next);
      if (!ng)
        return 7;
      say({{"event", "listening"},
           {"generation", next->generation},
           {"port", ng->store_port()}});
      if (ng->join())
        return 8;
    } else {
      std::istringstream port_line{read_line(control, 60s)};
      port_line >> word >> next->store_port;
      if (word != "port")
        return 9;
      ng = learner_group::form(*next);
      if (!ng)
        return 10;
    }
    formed(*ng, ms_since(failed_at));
    // Whoever completed the most steps is the source of truth.
    auto all = ng->all_gather(done);
    if (!all)
      return 11;
    auto root = static_cast<int>(std::max_element(all->begin(), all->end())
                                 - all->begin());
    if (ng->broadcast_parameters(*net, root)
        || ng->broadcast_optimizer(opt, root))
      return 12;
    say({{"event", "synced"}, {"root", root}, {"ms", ms_since(failed_at)}});
    current = &*ng;
    for (long s = 1; s <= after; ++s) {
      if (auto err = dice::test::train_step(*ng, net, opt, ng->rank(),
                                            static_cast<int>(1000 + s)))
        return 13;
      step_line(*ng, s);
    }
  }
  if (current->verify_identical(*net))
    return 14;
  if (!dump.empty()) {
    std::ofstream out{dump, std::ios::binary};
    out << dice::test::module_bytes(*net);
  }
  say({{"event", "done"},
       {"generation", current->generation()},
       {"digest", hex(*dice::parameters_digest(*net))},
       {"shm_messages", dice::detail::shm_messages()}});
  return 0;
}

// -- the tests ----------------------------------------------------------------

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

std::filesystem::path output_dir(const std::string& name) {
  auto dir = std::filesystem::path{DICE_BINARY_DIR} / "test-output"
    / "learner_group" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

// A learner process with a control pipe the test writes to.
struct learner {
  learner(int rank, int size, std::uint16_t port,
          const std::filesystem::path& dump, std::vector<std::string> extra) {
    // Both ends close on exec; only this learner's read end is let through
    // to it, so no other learner inherits a write end (which would keep its
    // read from seeing the end of the input when the test goes).
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0 || ::fcntl(fds[0], F_SETFD, 0) != 0)
      return;
    control = fds[1];
    std::vector<std::string> args{
      self_exe(), "--learner-worker",   "--rank",       std::to_string(rank),
      "--size",   std::to_string(size), "--port",       std::to_string(port),
      "--dump",   dump.string(),        "--control-fd", std::to_string(fds[0])};
    args.insert(args.end(), extra.begin(), extra.end());
    proc = std::make_unique<child_process>(args);
    ::close(fds[0]);
  }
  ~learner() {
    if (control >= 0)
      ::close(control);
  }
  void tell(const std::string& line) {
    auto s = line + "\n";
    EXPECT_EQ(::write(control, s.data(), s.size()),
              static_cast<ssize_t>(s.size()));
  }
  std::unique_ptr<child_process> proc;
  int control = -1;
};

// Starts rank 0, then the others with its store port.
std::vector<std::unique_ptr<learner>>
start_group(int n, const std::filesystem::path& dir,
            std::vector<std::string> extra) {
  std::vector<std::unique_ptr<learner>> ls;
  ls.push_back(std::make_unique<learner>(0, n, 0, dir / "rank0.bin", extra));
  std::smatch m;
  if (!ls[0]->proc->wait_for(std::regex{"\\{\"event\":\"listening\".*"}, 60s,
                             &m)) {
    ADD_FAILURE() << "rank 0 did not listen:\n" << ls[0]->proc->text();
    return {};
  }
  auto port = static_cast<std::uint16_t>(json_int(m[0].str(), "port"));
  for (int r = 1; r < n; ++r)
    ls.push_back(std::make_unique<learner>(
      r, n, port, dir / ("rank" + std::to_string(r) + ".bin"), extra));
  return ls;
}

// The digest each rank printed after `step` of `generation`.
std::string digest_at(child_process& p, int generation, int step) {
  for (auto& l : p.lines())
    if (json_str(l, "event") == "step"
        && json_int(l, "generation") == generation
        && json_int(l, "step") == step)
      return json_str(l, "digest");
  return "";
}

class LearnerGroupProcess : public testing::TestWithParam<int> {};

TEST_P(LearnerGroupProcess, ParametersIdenticalAcrossProcesses) {
  auto n = GetParam();
  auto dir = output_dir("identical_L" + std::to_string(n));
  auto ls = start_group(n, dir, {"--steps", "6"});
  ASSERT_EQ(ls.size(), static_cast<std::size_t>(n));
  for (auto& l : ls)
    ASSERT_EQ(l->proc->wait_exit(120s), 0) << l->proc->text();
  for (int s = 1; s <= 6; ++s) {
    auto d0 = digest_at(*ls[0]->proc, 0, s);
    ASSERT_FALSE(d0.empty()) << ls[0]->proc->text();
    for (int r = 1; r < n; ++r)
      EXPECT_EQ(digest_at(*ls[r]->proc, 0, s), d0) << "step " << s;
  }
  auto bytes0 = read_file(dir / "rank0.bin");
  ASSERT_GT(bytes0.size(), 1000u);
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(read_file(dir / ("rank" + std::to_string(r) + ".bin"))
                == bytes0)
      << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, LearnerGroupProcess, testing::Values(2, 3),
                         [](const testing::TestParamInfo<int>& info) {
                           return "L" + std::to_string(info.param);
                         });

// The exchange between learner processes of one host: 3 ranks, 6 steps,
// each rank's gradients to its 2 peers through their shared-memory outboxes
// (12 messages a rank; a rank counts only what it sent), with parameters
// identical at every step; with the shortcut off, the same run sends none
// that way and ends with the same parameters, to the bit.
TEST(LearnerGroupProcessShm, SameHostProcessesExchangeThroughSharedMemory) {
  std::string bytes_on;
  for (auto on : {1, 0}) {
    auto dir = output_dir("shm_" + std::to_string(on));
    auto ls = start_group(3, dir,
                          {"--steps", "6", "--mode", "exchange",
                           "--shared-memory", std::to_string(on)});
    ASSERT_EQ(ls.size(), 3u);
    for (auto& l : ls)
      ASSERT_EQ(l->proc->wait_exit(120s), 0) << l->proc->text();
    for (int s = 1; s <= 6; ++s) {
      auto d0 = digest_at(*ls[0]->proc, 0, s);
      ASSERT_FALSE(d0.empty()) << ls[0]->proc->text();
      for (int r = 1; r < 3; ++r)
        EXPECT_EQ(digest_at(*ls[r]->proc, 0, s), d0) << "step " << s;
    }
    for (int r = 0; r < 3; ++r) {
      std::smatch m;
      ASSERT_TRUE(
        ls[r]->proc->wait_for(std::regex{"\\{\"event\":\"done\".*"}, 1s, &m))
        << ls[r]->proc->text();
      EXPECT_EQ(json_int(m[0].str(), "shm_messages"), on ? 12 : 0)
        << "rank " << r << ": " << m[0].str();
    }
    auto bytes = read_file(dir / "rank0.bin");
    ASSERT_GT(bytes.size(), 1000u);
    if (on)
      bytes_on = bytes;
    else
      EXPECT_TRUE(bytes == bytes_on) << "shared memory changed the sums";
  }
}

// kill -9 of rank 1 of 3 mid-run: both survivors' steps end with an error
// well within the collective timeout, they re-form at L=2 and train on with
// bitwise identical parameters.
TEST(LearnerGroupProcessFailure, KillNineOfANonZeroRankThenSurvivorsReform) {
  constexpr long timeout_ms = 5000;
  auto dir = output_dir("kill9");
  auto ls = start_group(3, dir,
                        {"--steps", "1000000", "--after", "5", "--timeout-ms",
                         std::to_string(timeout_ms)});
  ASSERT_EQ(ls.size(), 3u);
  std::regex step3{"\"event\":\"step\",\"generation\":0,\"step\":3,"};
  for (auto& l : ls)
    ASSERT_TRUE(l->proc->wait_for(step3, 60s)) << l->proc->text();
  ls[1]->proc->kill(SIGKILL);
  auto killed_ns = now_ns();
  std::vector<double> detect_ms;
  for (int r : {0, 2}) {
    std::smatch m;
    ASSERT_TRUE(
      ls[r]->proc->wait_for(std::regex{"\\{\"event\":\"failed\".*"},
                            std::chrono::milliseconds{timeout_ms} + 10s, &m))
      << ls[r]->proc->text();
    auto line = m[0].str();
    auto ms = (json_num(line, "t_ns") - static_cast<double>(killed_ns)) / 1e6;
    detect_ms.push_back(ms);
    EXPECT_LT(ms, static_cast<double>(timeout_ms)) << line;
    RecordProperty("detect_ms_rank" + std::to_string(r), std::to_string(ms));
    RecordProperty("error_rank" + std::to_string(r), json_str(line, "error"));
  }
  EXPECT_EQ(ls[1]->proc->wait_exit(10s), 128 + SIGKILL);
  ls[0]->tell("survivors 0 2");
  ls[2]->tell("survivors 0 2");
  std::smatch m;
  ASSERT_TRUE(ls[0]->proc->wait_for(
    std::regex{"\\{\"event\":\"listening\",\"generation\":1,.*"}, 60s, &m))
    << ls[0]->proc->text();
  ls[2]->tell("port " + std::to_string(json_int(m[0].str(), "port")));
  for (int r : {0, 2})
    ASSERT_EQ(ls[r]->proc->wait_exit(120s), 0) << ls[r]->proc->text();
  for (int r : {0, 2})
    for (auto& l : ls[r]->proc->lines())
      if (json_str(l, "event") == "synced")
        RecordProperty("reform_ms_rank" + std::to_string(r),
                       std::to_string(json_num(l, "ms")));
  for (int s = 1; s <= 5; ++s) {
    auto d0 = digest_at(*ls[0]->proc, 1, s);
    ASSERT_FALSE(d0.empty()) << ls[0]->proc->text();
    EXPECT_EQ(digest_at(*ls[2]->proc, 1, s), d0) << "step " << s;
  }
  auto bytes0 = read_file(dir / "rank0.bin");
  ASSERT_GT(bytes0.size(), 1000u);
  EXPECT_TRUE(read_file(dir / "rank2.bin") == bytes0);
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string{argv[1]} == "--learner-worker")
    return worker_main(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
