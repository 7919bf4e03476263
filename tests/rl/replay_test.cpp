// --dice.record / --dice.replay (dice/rl/replay.hpp, docs/replay.md): a DQN
// and a PPO run of a learner, an evaluator and 2 collectors as 4 processes
// (dice-launch; real context and model exchangers over TCP, so deltas
// interleave with training as they come) are recorded; the learner alone
// replays them (the same program with --dice.replay) and reaches the
// recorded weights at every iteration and the checkpoint the run wrote at
// its end. A truncated or altered record is refused with its byte offset,
// and a replay fed the iterations in another order is caught at the first
// one. (The learner runs in a process of its own: in one process this
// machine's single-threaded OpenBLAS, called by several nodes' threads at
// once, does not compute the same floats, docs/replay.md.)

#include "dice/envs/cartpole.hpp"
#include "dice/rl/replay.hpp"

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

// A named namespace: unity batches put this file beside other tests.
namespace replay_test {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using namespace dice::rl;
using dice::test::bin_dir;
using dice::test::child_process;
using dice::test::scratch;

/// A short DQN run's options (dqn_cartpole).
std::vector<std::string> dqn_args(const fs::path& out) {
  return {bin_dir + "dqn_cartpole",
          "--seed=3",
          "--max-env-steps=4000",
          "--learning-starts=300",
          "--envs-per-collector=4",
          "--eval-every=100",
          "--eval-episodes=1",
          "--stop-value=1e9",
          "--quiet",
          "--no-plot",
          "--out=" + out.string()};
}

/// A short PPO run's options (ppo_cartpole).
std::vector<std::string> ppo_args(const fs::path& out) {
  return {bin_dir + "ppo_cartpole",
          "--seed=1",
          "--max-env-steps=6000",
          "--epochs=2",
          "--quiet",
          "--no-plot",
          "--stop-value=1e9",
          "--out=" + out.string()};
}

/// `args` with `extra` appended.
std::vector<std::string> with(std::vector<std::string> args,
                              std::vector<std::string> extra) {
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

/// Runs `args` as 4 processes (learner, evaluator, 2 collectors); the exit
/// code (-1: not within a minute) and the output.
std::pair<int, std::string> launch(const std::vector<std::string>& args) {
  std::vector<std::string> argv{bin_dir + "dice-launch", "--workers", "4",
                                "--"};
  argv.insert(argv.end(), args.begin(), args.end());
  child_process p{argv};
  auto rc = p.wait_exit(60s);
  return {rc ? *rc : -1, p.text()};
}

/// Runs one process (a replay); the exit code and the output.
std::pair<int, std::string> run(const std::vector<std::string>& args) {
  child_process p{args};
  auto rc = p.wait_exit(60s);
  return {rc ? *rc : -1, p.text()};
}

/// The final weights hash a replay printed (0: none).
std::uint64_t final_hash(const std::string& text) {
  auto i = text.find("weights hashes match, final ");
  if (i == std::string::npos)
    return 0;
  return std::stoull(text.substr(i + 28, 16), nullptr, 16);
}

/// The recorded runs, each made the first time a test of this process
/// asks for it (CTest runs every test in a process of its own).
class Replay : public ::testing::Test {
 public:
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

 protected:
  static fs::path dir() {
    if (dir_ == nullptr)
      dir_ = new scratch{"dice_rl_replay"};
    return dir_->dir;
  }

  /// A DQN run recorded in dir()/dqn.
  static const std::pair<int, std::string>& dqn() {
    static auto x = launch(with(dqn_args(dir() / "dqn_out"),
                                {"--dice.record=" + (dir() / "dqn").string()}));
    return x;
  }

  /// A DQN run recorded in dir()/small, at most small_limit bytes.
  static const std::pair<int, std::string>& small() {
    static auto x = launch(
      with(dqn_args(dir() / "small_out"),
           {"--dice.record=" + (dir() / "small").string(),
            "--dice.record-max-bytes=" + std::to_string(small_limit)}));
    return x;
  }

  /// A PPO run recorded in dir()/ppo.
  static const std::pair<int, std::string>& ppo() {
    static auto x = launch(with(ppo_args(dir() / "ppo_out"),
                                {"--dice.record=" + (dir() / "ppo").string()}));
    return x;
  }

  static inline scratch* dir_ = nullptr;
  static constexpr std::int64_t small_limit = 100000;
};

/// A record of 6 iterations written directly (the format's tests need no
/// run): a small Q-network's weights, payloads of floats, one delta each.
fs::path synthetic_record(const fs::path& dir) {
  auto w = record_writer::create(dir.string(), 0);
  EXPECT_TRUE(w);
  q_network net{4, 2, {8}};
  record_start start;
  start.algo = "dqn";
  start.options = "{}";
  EXPECT_FALSE((*w)->start(start, *net));
  for (std::int64_t i = 0; i < 6; ++i) {
    recorded_iteration x;
    x.total_step = i;
    x.trajectories.push_back(dice::pack(std::vector<float>(50, 0.5f * i), 2));
    x.deltas.push_back({2, 7, static_cast<std::uint64_t>(i + 1), i - 1});
    x.weights_hash = weights_hash(*net);
    EXPECT_FALSE((*w)->iteration(x));
  }
  EXPECT_FALSE((*w)->finish());
  return dir / record_writer::file_name;
}

// Offsets of the entries of a record file (header: 24 bytes; each entry a
// 16-byte head whose second u32 is the payload length).
std::vector<std::uint64_t> entry_offsets(const std::string& bytes) {
  std::vector<std::uint64_t> xs;
  std::uint64_t pos = 24;
  while (pos + 16 <= bytes.size()) {
    xs.push_back(pos);
    std::uint32_t len = 0;
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    pos += 16 + len;
  }
  return xs;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f{p, std::ios::binary | std::ios::trunc};
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(Replay, ATwoCollectorDqnRunReplaysToBitIdenticalWeights) {
  ASSERT_EQ(dqn().first, 0) << dqn().second;
  auto rec = read_record((dir() / "dqn").string());
  ASSERT_TRUE(rec) << dice::render(rec.error());
  EXPECT_EQ(rec->start.algo, "dqn");
  EXPECT_FALSE(rec->cut);
  // Both collectors' deltas reached the learner, and it trained on them.
  std::set<std::uint32_t> senders;
  std::set<std::uint64_t> hashes;
  std::uint64_t deltas = 0;
  for (auto& it : rec->iterations) {
    for (auto& d : it.deltas)
      senders.insert(d.sender);
    deltas += it.deltas.size();
    hashes.insert(it.weights_hash);
  }
  EXPECT_EQ(senders, (std::set<std::uint32_t>{2, 3}));
  EXPECT_GT(deltas, 10u);
  EXPECT_GT(rec->iterations.back().train_iter_after, 100);
  EXPECT_GT(hashes.size(), 10u);
  // The learner alone, from the record.
  auto [rc, text] = run(with(dqn_args(dir() / "replay_out"),
                             {"--dice.replay=" + (dir() / "dqn").string()}));
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("replayed " + std::to_string(rec->iterations.size())
                      + " iterations (" + std::to_string(deltas) + " deltas"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("all " + std::to_string(rec->iterations.size() + 1)
                      + " weights hashes match"),
            std::string::npos)
    << text;
  // The recorded run's last checkpoint is what the replay ends with.
  q_network net{4, 2, {64, 64}};
  ASSERT_FALSE(load_q_network(net, (dir() / "dqn_out" / "latest.pt").string()));
  EXPECT_EQ(weights_hash(*net), final_hash(text)) << text;
}

TEST_F(Replay, ATwoCollectorPpoRunReplaysToBitIdenticalWeights) {
  ASSERT_EQ(ppo().first, 0) << ppo().second;
  auto rec = read_record((dir() / "ppo").string());
  ASSERT_TRUE(rec) << dice::render(rec.error());
  EXPECT_EQ(rec->start.algo, "ppo");
  std::set<std::uint32_t> senders;
  for (auto& it : rec->iterations)
    for (auto& d : it.deltas)
      senders.insert(d.sender);
  EXPECT_EQ(senders, (std::set<std::uint32_t>{2, 3}));
  EXPECT_GT(rec->iterations.back().train_iter_after, 3);
  auto [rc, text] = run(with(ppo_args(dir() / "replay_out"),
                             {"--dice.replay=" + (dir() / "ppo").string()}));
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("all " + std::to_string(rec->iterations.size() + 1)
                      + " weights hashes match"),
            std::string::npos)
    << text;
  auto net = make_actor_critic(dice::envs::cartpole{}.observation_space(),
                               dice::envs::cartpole{}.action_space());
  ASSERT_TRUE(net);
  ASSERT_FALSE(
    load_checkpoint(*net, (dir() / "ppo_out" / "latest.pt").string()));
  EXPECT_EQ(weights_hash(**net), final_hash(text)) << text;
  // Other options than the recorded run's are refused, naming the option.
  auto other = run(
    with(ppo_args(dir() / "replay_out"),
         {"--epochs=3", "--dice.replay=" + (dir() / "ppo").string()}));
  EXPECT_EQ(other.first, 1) << other.second;
  EXPECT_NE(other.second.find("epochs (recorded 2, given 3)"),
            std::string::npos)
    << other.second;
}

TEST_F(Replay, ATruncatedRecordIsRefusedWithItsOffset) {
  auto path = synthetic_record(dir() / "cut");
  auto bytes = dice::test::read_all(path);
  auto offsets = entry_offsets(bytes);
  ASSERT_GT(offsets.size(), 3u);
  // Cut inside the last iteration entry.
  auto last_iteration = offsets[offsets.size() - 2];
  write_bytes(path, bytes.substr(0, last_iteration + 20));
  auto rec = read_record((dir() / "cut").string());
  ASSERT_FALSE(rec);
  auto msg = dice::render(rec.error());
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated entry"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at byte offset " + std::to_string(last_iteration)),
            std::string::npos)
    << msg;
  // Cut between entries: the end entry is missing.
  auto end = offsets.back();
  write_bytes(path, bytes.substr(0, end));
  rec = read_record((dir() / "cut").string());
  ASSERT_FALSE(rec);
  msg = dice::render(rec.error());
  EXPECT_NE(msg.find("without its end entry"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at byte offset " + std::to_string(end)),
            std::string::npos)
    << msg;
  // And replay says so instead of replaying part of it.
  auto [rc, text] = run(with(dqn_args(dir() / "replay_out"),
                             {"--dice.replay=" + (dir() / "cut").string()}));
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("without its end entry"), std::string::npos) << text;
}

TEST_F(Replay, ARecordWithOneAlteredByteIsRefusedWithItsOffset) {
  auto path = synthetic_record(dir() / "altered");
  auto bytes = dice::test::read_all(path);
  auto offsets = entry_offsets(bytes);
  // One byte in the middle of the file, which lies in some entry.
  auto pos = bytes.size() / 2;
  std::uint64_t entry = 0;
  for (auto o : offsets)
    if (o <= pos)
      entry = o;
  bytes[pos] = static_cast<char>(bytes[pos] ^ 0x01);
  write_bytes(path, bytes);
  auto rec = read_record((dir() / "altered").string());
  ASSERT_FALSE(rec);
  auto msg = dice::render(rec.error());
  EXPECT_NE(msg.find("altered entry (checksum mismatch) at byte offset "
                     + std::to_string(entry)),
            std::string::npos)
    << msg;
  // A flipped header byte is refused at offset 0.
  bytes[pos] = static_cast<char>(bytes[pos] ^ 0x01);
  bytes[13] = static_cast<char>(bytes[13] ^ 0x40);
  write_bytes(path, bytes);
  rec = read_record((dir() / "altered").string());
  ASSERT_FALSE(rec);
  EXPECT_NE(dice::render(rec.error()).find("at byte offset 0"),
            std::string::npos);
}

TEST_F(Replay, IterationsInAnotherOrderAreCaughtAtTheFirstOne) {
  ASSERT_EQ(dqn().first, 0) << dqn().second;
  auto rec = read_record((dir() / "dqn").string());
  ASSERT_TRUE(rec);
  // Two neighbouring iterations, both with data, the first of them training:
  // the learner sees the same deltas, only in another order.
  auto& its = rec->iterations;
  std::size_t i = 0;
  while (i + 1 < its.size()
         && !(its[i].train_iter_after > its[i].train_iter
              && !its[i].trajectories.empty()
              && !its[i + 1].trajectories.empty()
              && its[i].trajectories.size() == its[i + 1].trajectories.size()))
    ++i;
  ASSERT_LT(i + 1, its.size());
  std::swap(its[i].trajectories, its[i + 1].trajectories);
  std::swap(its[i].trajectory_end_idx, its[i + 1].trajectory_end_idx);
  std::swap(its[i].deltas, its[i + 1].deltas);
  ASSERT_FALSE(write_record((dir() / "swapped").string(), *rec));
  // The rewritten record is well formed...
  ASSERT_TRUE(read_record((dir() / "swapped").string()));
  // ...but the learner does not reach the recorded weights.
  auto [rc, text] = run(
    with(dqn_args(dir() / "replay_out"),
         {"--dice.replay=" + (dir() / "swapped").string()}));
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("replay diverged at iteration "
                      + std::to_string(its[i].total_step) + " "),
            std::string::npos)
    << text;
  // Another seed (the learner's sampling RNG) is refused before replaying.
  auto args = dqn_args(dir() / "replay_out");
  args[1] = "--seed=4";
  auto seed = run(with(args, {"--dice.replay=" + (dir() / "dqn").string()}));
  EXPECT_EQ(seed.first, 1) << seed.second;
  EXPECT_NE(seed.second.find("seed (recorded 3, given 4)"), std::string::npos)
    << seed.second;
}

TEST_F(Replay, ARecordCutAtItsSizeLimitReplaysUpToTheCut) {
  // The run went on past the limit; the record stopped within it.
  ASSERT_EQ(small().first, 0) << small().second;
  EXPECT_NE(small().second.find("--dice.record-max-bytes reached"),
            std::string::npos);
  auto path = dir() / "small" / "learner.rec";
  EXPECT_LE(fs::file_size(path), static_cast<std::uintmax_t>(small_limit));
  auto rec = read_record((dir() / "small").string());
  ASSERT_TRUE(rec) << dice::render(rec.error());
  EXPECT_TRUE(rec->cut);
  ASSERT_FALSE(rec->iterations.empty());
  auto [rc, text] = run(with(dqn_args(dir() / "replay_out"),
                             {"--dice.replay=" + (dir() / "small").string()}));
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("cut by --dice.record-max-bytes"), std::string::npos)
    << text;
  EXPECT_NE(text.find("all " + std::to_string(rec->iterations.size() + 1)
                      + " weights hashes match"),
            std::string::npos)
    << text;
}

TEST_F(Replay, AnExistingRecordIsNeverOverwritten) {
  auto path = synthetic_record(dir() / "existing");
  auto before = dice::test::read_all(path);
  ASSERT_TRUE(read_record((dir() / "existing").string()));
  auto w = record_writer::create((dir() / "existing").string(), 0);
  ASSERT_FALSE(w);
  EXPECT_NE(dice::render(w.error()).find("a record is already there"),
            std::string::npos);
  EXPECT_EQ(dice::test::read_all(path), before);
}

} // namespace replay_test
