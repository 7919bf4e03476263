// DQN pieces (TD targets, n-step transitions, target updates, replay,
// checkpoints) on hand-computed data, and one short end-to-end run of the
// distributed program in-process.

#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include "support/json.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

// The example is a program, not a library: its sources compile into this
// test (one torch translation unit instead of three).
#include "cartpole.hpp"
#include "dqn.hpp"

using namespace dqn;

namespace {

torch::Tensor vec(std::vector<float> xs) {
  return torch::tensor(xs);
}

torch::Tensor mat(std::vector<float> xs, std::int64_t rows) {
  return torch::tensor(xs).reshape({rows, -1});
}

void expect_close(const torch::Tensor& x, std::vector<float> want) {
  ASSERT_EQ(x.numel(), static_cast<std::int64_t>(want.size()));
  auto c = x.contiguous();
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(c.data_ptr<float>()[i], want[i], 1e-5) << "index " << i;
}

TEST(TdTarget, MaxOverTheTargetNet) {
  // r + discount * max_a Q'(s', a): 1 + 0.99 * 3, 0.5 + 0 * 5 (terminal),
  // 2 + 0.9801 * -1.
  auto t = td_target(vec({1, 0.5, 2}), vec({0.99f, 0, 0.9801f}),
                     mat({1, 3, 5, 2, -1, -2}, 3));
  expect_close(t, {3.97f, 0.5f, 1.0199f});
}

TEST(TdTarget, DoubleDqnPicksTheActionWithTheOnlineNet) {
  // Online argmax: 0, 1, 1 -> target values 1, 2, -2.
  auto t = td_target(vec({1, 0.5, 2}), vec({0.99f, 0, 0.9801f}),
                     mat({1, 3, 5, 2, -1, -2}, 3), mat({2, 1, 0, 1, 0, 3}, 3));
  expect_close(t, {1.99f, 0.5f, 0.0398f});
}

// One environment, n = 3, gamma = 0.5, obs = (t, 0, 0, 0) before step t.
struct nstep_fixture {
  nstep_accumulator acc{1, 3, 0.5f};
  transition_batch out;
  void step(float t, float reward, bool term = false, bool trunc = false) {
    float obs[4] = {t, 0, 0, 0};
    float next[4] = {t + 1, 0, 0, 0};
    std::int64_t action = static_cast<std::int64_t>(t) % 2;
    std::uint8_t te = term;
    std::uint8_t tr = trunc;
    acc.add(obs, &action, &reward, next, &te, &tr, out);
  }
};

TEST(Nstep, SumsThreeDiscountedRewardsAndFlushesOnTermination) {
  nstep_fixture f;
  f.step(1, 1);
  f.step(2, 2);
  EXPECT_EQ(f.out.size(), 0u); // not yet 3 steps old
  f.step(3, 3);
  ASSERT_EQ(f.out.size(), 1u);
  EXPECT_FLOAT_EQ(f.out.reward[0], 1 + 0.5f * 2 + 0.25f * 3);
  EXPECT_FLOAT_EQ(f.out.discount[0], 0.125f);
  EXPECT_EQ(f.out.obs[0], 1.0f);
  EXPECT_EQ(f.out.next_obs[0], 4.0f); // bootstrap from s_4
  EXPECT_EQ(f.out.action[0], 1);
  f.step(4, 4, true); // terminates: steps 2, 3, 4 are flushed
  ASSERT_EQ(f.out.size(), 4u);
  EXPECT_FLOAT_EQ(f.out.reward[1], 2 + 0.5f * 3 + 0.25f * 4);
  EXPECT_FLOAT_EQ(f.out.reward[2], 3 + 0.5f * 4);
  EXPECT_FLOAT_EQ(f.out.reward[3], 4);
  for (int i = 1; i < 4; ++i)
    EXPECT_EQ(f.out.discount[i], 0.0f) << i; // nothing to bootstrap from
}

TEST(Nstep, TruncationStillBootstraps) {
  nstep_fixture f;
  f.step(1, 1);
  f.step(2, 1, false, true);
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_FLOAT_EQ(f.out.reward[0], 1.5f);
  EXPECT_FLOAT_EQ(f.out.discount[0], 0.25f);
  EXPECT_FLOAT_EQ(f.out.reward[1], 1.0f);
  EXPECT_FLOAT_EQ(f.out.discount[1], 0.5f);
  EXPECT_EQ(f.out.next_obs[0], 3.0f);
  EXPECT_EQ(f.out.next_obs[4], 3.0f);
}

bool same_params(torch::nn::Module& a, torch::nn::Module& b) {
  auto pb = b.named_parameters();
  for (auto& kvp : a.named_parameters())
    if (!torch::equal(kvp.value(), pb[kvp.key()]))
      return false;
  return true;
}

TEST(TargetNetwork, HardAndSoftUpdates) {
  torch::manual_seed(1);
  q_network a{8};
  q_network b{8};
  ASSERT_FALSE(same_params(*a, *b));
  auto before = b->fc1->weight.clone();
  soft_update(*b, *a, 0.25);
  EXPECT_TRUE(
    torch::allclose(b->fc1->weight, 0.75 * before + 0.25 * a->fc1->weight));
  hard_update(*b, *a);
  EXPECT_TRUE(same_params(*a, *b));
}

TEST(TargetNetwork, LearnerCopiesOnlineEveryKSteps) {
  torch::manual_seed(2);
  dqn_config cfg;
  cfg.hidden = 16;
  cfg.batch_size = 4;
  cfg.target_update_every = 3;
  dqn_learner l{q_network{cfg.hidden}, cfg, 1};
  EXPECT_TRUE(same_params(*l.online(), *l.target()));
  sample_batch b{
    mat({0.1f, 0.2f, 0.3f, 0.4f, -0.1f, 0, 0.2f, 0, 0, 0, 0, 0, 1, 1, 1, 1}, 4),
    torch::tensor({0, 1, 1, 0}, torch::kLong), vec({1, 1, 1, 1}),
    torch::zeros({4, 4}), vec({0.99f, 0.99f, 0, 0.99f})};
  l.update_on(b);
  EXPECT_FALSE(same_params(*l.online(), *l.target()));
  l.update_on(b);
  EXPECT_FALSE(same_params(*l.online(), *l.target()));
  l.update_on(b);
  EXPECT_TRUE(same_params(*l.online(), *l.target()));
  EXPECT_EQ(l.updates(), 3);
}

TEST(Learner, FitsAFixedTarget) {
  // With discount 0 the target is the reward: the loss must fall.
  torch::manual_seed(3);
  dqn_config cfg;
  cfg.hidden = 16;
  cfg.lr = 1e-2;
  dqn_learner l{q_network{cfg.hidden}, cfg, 1};
  sample_batch b{torch::randn({32, 4}),
                 torch::randint(0, 2, {32}, torch::kLong), torch::randn({32}),
                 torch::randn({32, 4}), torch::zeros({32})};
  auto first = l.update_on(b);
  float last = first;
  for (int i = 0; i < 300; ++i)
    last = l.update_on(b);
  EXPECT_LT(last, first * 0.1f);
}

TEST(ReplayBuffer, KeepsTheNewestAndSamplesWhatItHolds) {
  replay_buffer buf{3, 1};
  transition_batch xs;
  for (int i = 0; i < 5; ++i) {
    float v = static_cast<float>(i);
    xs.obs.insert(xs.obs.end(), {v, v, v, v});
    xs.next_obs.insert(xs.next_obs.end(), {v, v, v, v});
    xs.action.push_back(static_cast<std::uint8_t>(i % 2));
    xs.reward.push_back(v);
    xs.discount.push_back(0.5f);
  }
  buf.add(xs);
  EXPECT_EQ(buf.size(), 3u);
  auto s = buf.sample(64);
  EXPECT_EQ(s.obs.sizes(), (std::vector<std::int64_t>{64, 4}));
  auto r = s.reward;
  EXPECT_GE(r.min().item<float>(), 2.0f); // 0 and 1 were overwritten
  EXPECT_TRUE(torch::equal(s.obs.select(1, 0), r));
  EXPECT_TRUE(torch::equal(s.action, r.to(torch::kLong) % 2));
}

TEST(Epsilon, LinearAndExponentialDecay) {
  dqn_config cfg;
  cfg.eps_start = 1.0;
  cfg.eps_end = 0.1;
  cfg.eps_decay_steps = 100;
  EXPECT_DOUBLE_EQ(epsilon_at(cfg, 0), 1.0);
  EXPECT_DOUBLE_EQ(epsilon_at(cfg, 50), 0.55);
  EXPECT_DOUBLE_EQ(epsilon_at(cfg, 1000), 0.1);
  cfg.eps_decay = decay_kind::exponential;
  EXPECT_DOUBLE_EQ(epsilon_at(cfg, 0), 1.0);
  EXPECT_NEAR(epsilon_at(cfg, 100), 0.1 + 0.9 * std::exp(-1.0), 1e-12);
}

TEST(TransitionBatch, RoundTripsThroughAPayload) {
  transition_batch xs;
  xs.obs = {1, 2, 3, 4};
  xs.next_obs = {5, 6, 7, 8};
  xs.action = {1};
  xs.reward = {2.5f};
  xs.discount = {0.97f};
  auto p = dice::pack(std::vector<transition_batch>{xs}, 4, 17);
  EXPECT_EQ(p.origin, 4u);
  EXPECT_EQ(p.model_version, 17);
  auto back = dice::unpack<transition_batch>(p);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].obs, xs.obs);
  EXPECT_EQ((*back)[0].next_obs, xs.next_obs);
  EXPECT_EQ((*back)[0].action, xs.action);
  EXPECT_EQ((*back)[0].reward, xs.reward);
  EXPECT_EQ((*back)[0].discount, xs.discount);
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::path{DICE_BINARY_DIR} / "test-output" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(Checkpoint, SaveAndLoadRoundTrip) {
  auto dir = scratch_dir("dqn_checkpoint");
  torch::manual_seed(4);
  q_network a{8};
  q_network b{8};
  auto path = (dir / "net.pt").string();
  save_q_network(a, path);
  load_q_network(b, path);
  EXPECT_TRUE(same_params(*a, *b));
  q_network wrong{16};
  EXPECT_ANY_THROW(load_q_network(wrong, path));
}

TEST(Greedy, RandomNetworkIsPoorAtCartpole) {
  torch::manual_seed(5);
  q_network net{8};
  auto returns = evaluate_greedy(net, 10, 1);
  ASSERT_EQ(returns.size(), 10u);
  for (auto r : returns) {
    EXPECT_GE(r, 1.0);
    EXPECT_LE(r, 500.0);
  }
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f{p};
  return {std::istreambuf_iterator<char>{f}, {}};
}

TEST(EndToEnd, ShortInProcessRunBeatsARandomPolicy) {
  auto dir = scratch_dir("dqn_e2e");
  caf::actor_system_config cfg;
  dice::add_message_types(cfg);
  caf::actor_system sys{cfg};
  run_options opts;
  opts.collectors = 2;
  opts.seed = 1;
  opts.out = dir.string();
  opts.stop_value = 300;      // clearly better than random (~22)
  opts.max_env_steps = 60000; // budget: the run ends either way
  opts.max_seconds = 45;
  opts.progress = false;
  opts.plot = false;
  auto sum = run_training(sys, opts);
  ASSERT_TRUE(sum) << dice::render(sum.error());
  EXPECT_GT(sum->best_eval, 100.0) << to_string(*sum);
  EXPECT_FALSE(sum->evals.empty());
  EXPECT_GT(sum->env_steps, 0);
  EXPECT_GT(sum->train_iters, 0);
  EXPECT_GE(sum->lag_min, 0.0);
  EXPECT_LE(sum->lag_mean, sum->lag_max);
  EXPECT_LT(sum->seconds, 60.0);
  // What a user finds in OUT.
  EXPECT_TRUE(std::filesystem::exists(dir / "latest.pt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "best.pt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "summary.json"));
  auto metrics = read_all(dir / "metrics.jsonl");
  std::set<std::string> roles;
  auto lines = dice::test::json_lines(metrics);
  for (auto& j : lines)
    roles.insert(j.value("role", ""));
  EXPECT_EQ(roles, (std::set<std::string>{"learner", "evaluator", "collector"}))
    << metrics;
  // Every line of the file is one JSON object.
  EXPECT_EQ(
    lines.size(),
    static_cast<std::size_t>(std::count(metrics.begin(), metrics.end(), '\n')));
  // The best checkpoint plays as well as its evaluation said.
  auto returns = run_eval_only((dir / "best.pt").string(), opts, 10);
  ASSERT_TRUE(returns);
  double mean = 0;
  for (auto r : *returns)
    mean += r;
  EXPECT_GT(mean / 10, 50.0);
}

} // namespace
