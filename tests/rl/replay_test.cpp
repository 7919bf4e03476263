// --dice.record / --dice.replay (dice/rl/replay.hpp, docs/replay.md): a DQN
// and a PPO run of a learner and 2 collectors in one process (real context
// and model exchangers, actors on their own threads, so deltas interleave
// with training as they come) are recorded; the learner alone replays them
// and reaches the recorded weights at every iteration and the checkpoint
// the run wrote at its end. A truncated or altered record is refused with
// its byte offset, and a replay fed the iterations in another order is
// caught at the first one.

#include "dice/envs/cartpole.hpp"
#include "dice/rl/replay.hpp"

#include "ppo/run_support.hpp"
#include "support/files.hpp"
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

// A named namespace: unity batches put this file beside other tests.
namespace replay_test {

namespace fs = std::filesystem;
using namespace dice::rl;
using dice::test::scratch;

std::unique_ptr<dice::env> cartpole(std::size_t) {
  return std::make_unique<dice::envs::cartpole>();
}

struct dqn_config : dqn_run_config {
  explicit dqn_config(const fs::path& dir) {
    make_env = cartpole;
    title = "DQN replay test";
    collectors = 2;
    envs_per_collector = 4;
    seed = 3;
    out = (dir / "out").string();
    max_env_steps = 4000;
    max_seconds = 60;
    eval_every = 100;
    eval_episodes = 1;
    dqn.values.learning_starts = 300;
    quiet = true;
    no_plot = true;
  }
};

int run_dqn(dqn_config& cfg) {
  caf::actor_system sys{cfg};
  return dice::run_nodes(sys, cfg, [&](dice::node_setup& n) {
    n.print_report(false);
    use_dqn(n, cfg);
  });
}

/// The recorded runs, made once for every test of the suite.
class Replay : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    dir_ = new scratch{"dice_rl_replay"};
    dqn_config cfg{dir_->dir};
    cfg.record = (dir_->dir / "dqn").string();
    dqn_rc_ = run_dqn(cfg);
    dqn_config small{dir_->dir / "small"};
    small.record = (dir_->dir / "small_rec").string();
    small.record_max_bytes = small_limit;
    small_rc_ = run_dqn(small);
    ppo_rc_ = dice::test::run_ppo(
      {"--seed=1", "--collectors=2", "--max-env-steps=6000", "--max-seconds=60",
       "--quiet", "--no-plot", "--epochs=2",
       "--out=" + (dir_->dir / "ppo_out").string(),
       "--dice.record=" + (dir_->dir / "ppo").string()},
      cartpole);
  }

  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

 protected:
  static fs::path dir() {
    return dir_->dir;
  }

  static inline scratch* dir_ = nullptr;
  static inline int dqn_rc_ = -1;
  static inline int ppo_rc_ = -1;
  static inline int small_rc_ = -1;
  static constexpr std::int64_t small_limit = 100000;
};

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

fs::path copy_record(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy_file(from / "learner.rec", to / "learner.rec",
                fs::copy_options::overwrite_existing);
  return to / "learner.rec";
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f{p, std::ios::binary | std::ios::trunc};
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(Replay, ATwoCollectorDqnRunReplaysToBitIdenticalWeights) {
  ASSERT_EQ(dqn_rc_, 0);
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
  EXPECT_EQ(senders.size(), 2u);
  EXPECT_GT(deltas, 10u);
  EXPECT_GT(rec->iterations.back().train_iter_after, 100);
  EXPECT_GT(hashes.size(), 10u);
  // The learner alone, from the record.
  dqn_config cfg{dir()};
  cfg.replay = (dir() / "dqn").string();
  auto rep = replay_dqn(cfg);
  ASSERT_TRUE(rep) << dice::render(rep.error());
  EXPECT_EQ(rep->iterations, rec->iterations.size());
  EXPECT_EQ(rep->hashes_checked, rec->iterations.size() + 1);
  EXPECT_EQ(rep->deltas, deltas);
  // The recorded run's last checkpoint is what the replay ends with.
  q_network net{4, 2, {64, 64}};
  ASSERT_FALSE(load_q_network(net, (dir() / "out" / "latest.pt").string()));
  EXPECT_EQ(weights_hash(*net), rep->final_hash);
}

TEST_F(Replay, ATwoCollectorPpoRunReplaysToBitIdenticalWeights) {
  ASSERT_EQ(ppo_rc_, 0);
  auto rec = read_record((dir() / "ppo").string());
  ASSERT_TRUE(rec) << dice::render(rec.error());
  EXPECT_EQ(rec->start.algo, "ppo");
  std::set<std::uint32_t> senders;
  for (auto& it : rec->iterations)
    for (auto& d : it.deltas)
      senders.insert(d.sender);
  EXPECT_EQ(senders.size(), 2u);
  EXPECT_GT(rec->iterations.back().train_iter_after, 3);
  dice::test::ppo_run_config cfg;
  cfg.seed = 1;
  cfg.ppo.values.epochs = 2;
  cfg.replay = (dir() / "ppo").string();
  auto rep = replay_ppo(cfg, cfg.ppo, cartpole);
  ASSERT_TRUE(rep) << dice::render(rep.error());
  EXPECT_EQ(rep->hashes_checked, rec->iterations.size() + 1);
  auto net = make_actor_critic(dice::envs::cartpole{}.observation_space(),
                               dice::envs::cartpole{}.action_space());
  ASSERT_TRUE(net);
  ASSERT_FALSE(
    load_checkpoint(*net, (dir() / "ppo_out" / "latest.pt").string()));
  EXPECT_EQ(weights_hash(**net), rep->final_hash);
  // Other options than the recorded run's are refused, naming the option.
  cfg.ppo.values.epochs = 3;
  auto other = replay_ppo(cfg, cfg.ppo, cartpole);
  ASSERT_FALSE(other);
  EXPECT_NE(dice::render(other.error()).find("epochs (recorded 2, given 3)"),
            std::string::npos)
    << dice::render(other.error());
}

TEST_F(Replay, ATruncatedRecordIsRefusedWithItsOffset) {
  ASSERT_EQ(dqn_rc_, 0);
  auto path = copy_record(dir() / "dqn", dir() / "cut");
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
  dqn_config cfg{dir()};
  cfg.replay = (dir() / "cut").string();
  auto rep = replay_dqn(cfg);
  ASSERT_FALSE(rep);
  EXPECT_NE(dice::render(rep.error()).find("without its end entry"),
            std::string::npos);
}

TEST_F(Replay, ARecordWithOneAlteredByteIsRefusedWithItsOffset) {
  ASSERT_EQ(dqn_rc_, 0);
  auto path = copy_record(dir() / "dqn", dir() / "altered");
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
  ASSERT_EQ(dqn_rc_, 0);
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
  dqn_config cfg{dir()};
  cfg.replay = (dir() / "swapped").string();
  auto rep = replay_dqn(cfg);
  ASSERT_FALSE(rep);
  auto msg = dice::render(rep.error());
  EXPECT_NE(msg.find("replay diverged at iteration "
                     + std::to_string(its[i].total_step) + " "),
            std::string::npos)
    << msg;
  // Another seed (the learner's sampling RNG) is refused before replaying.
  cfg.replay = (dir() / "dqn").string();
  cfg.seed = 4;
  rep = replay_dqn(cfg);
  ASSERT_FALSE(rep);
  EXPECT_NE(dice::render(rep.error()).find("seed (recorded 3, given 4)"),
            std::string::npos)
    << dice::render(rep.error());
}

TEST_F(Replay, ARecordCutAtItsSizeLimitReplaysUpToTheCut) {
  // The run went on past the limit; the record stopped within it.
  ASSERT_EQ(small_rc_, 0);
  auto path = dir() / "small_rec" / "learner.rec";
  EXPECT_LE(fs::file_size(path), static_cast<std::uintmax_t>(small_limit));
  auto rec = read_record((dir() / "small_rec").string());
  ASSERT_TRUE(rec) << dice::render(rec.error());
  EXPECT_TRUE(rec->cut);
  ASSERT_FALSE(rec->iterations.empty());
  auto full = read_record((dir() / "dqn").string());
  ASSERT_TRUE(full);
  EXPECT_LT(rec->iterations.size(), full->iterations.size());
  dqn_config cfg{dir()};
  cfg.replay = (dir() / "small_rec").string();
  auto rep = replay_dqn(cfg);
  ASSERT_TRUE(rep) << dice::render(rep.error());
  EXPECT_TRUE(rep->cut);
  EXPECT_EQ(rep->hashes_checked, rec->iterations.size() + 1);
}

TEST_F(Replay, AnExistingRecordIsNeverOverwritten) {
  ASSERT_EQ(dqn_rc_, 0);
  auto before = dice::test::read_all(dir() / "dqn" / "learner.rec");
  auto w = record_writer::create((dir() / "dqn").string(), 0);
  ASSERT_FALSE(w);
  EXPECT_NE(dice::render(w.error()).find("a record is already there"),
            std::string::npos);
  EXPECT_EQ(dice::test::read_all(dir() / "dqn" / "learner.rec"), before);
}

} // namespace replay_test
