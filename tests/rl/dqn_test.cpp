// DQN's pieces on hand-computed data (TD targets, target updates), the
// Q-network against the examples' network, the learner (uniform and
// prioritized) and its checkpoint state.

#include "dice/core/errc.hpp"
#include "dice/rl/dqn.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dice::rl;

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

bool same_params(torch::nn::Module& a, torch::nn::Module& b) {
  auto pb = b.named_parameters();
  for (auto& kvp : a.named_parameters())
    if (!torch::equal(kvp.value(), pb[kvp.key()]))
      return false;
  return true;
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::path{DICE_BINARY_DIR} / "test-output" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
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

// examples/dqn_cartpole's network, kept to check that the library's draws
// the same initial weights for the same torch seed.
struct old_q_network_impl : torch::nn::Module {
  explicit old_q_network_impl(std::int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(4, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    out = register_module("out", torch::nn::Linear(hidden, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    return out(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
};

TEST(QNetwork, InitialWeightsAreTheExamplesNetwork) {
  torch::manual_seed(7);
  old_q_network_impl old{64};
  torch::manual_seed(7);
  q_network net{4, 2, {64, 64}};
  auto p = net->named_parameters();
  EXPECT_TRUE(torch::equal(p["0.weight"], old.fc1->weight));
  EXPECT_TRUE(torch::equal(p["0.bias"], old.fc1->bias));
  EXPECT_TRUE(torch::equal(p["2.weight"], old.fc2->weight));
  EXPECT_TRUE(torch::equal(p["2.bias"], old.fc2->bias));
  EXPECT_TRUE(torch::equal(p["4.weight"], old.out->weight));
  EXPECT_TRUE(torch::equal(p["4.bias"], old.out->bias));
  // And the same function.
  auto x = torch::randn({5, 4});
  EXPECT_TRUE(torch::allclose(net->forward(x), old.forward(x)));
  // And the torch RNG is left where the old network left it.
  auto after_new = torch::randn({3});
  torch::manual_seed(7);
  old_q_network_impl again{64};
  (void)torch::randn({5, 4});
  EXPECT_TRUE(torch::equal(after_new, torch::randn({3})));
}

TEST(QNetwork, LearnerDrawsTorchsRngAsTheExamplesDid) {
  // The examples built the online net, then the learner built its target
  // as a new network (and copied the online weights into it): two draws of
  // the initial weights, so that whatever a seeded run draws next (other
  // nets, torch::randn) is the same as before.
  torch::manual_seed(3);
  old_q_network_impl online{64};
  old_q_network_impl target{64};
  auto next_old = torch::randn({4});
  torch::manual_seed(3);
  dqn_learner l{q_network{4, 2, {64, 64}}, dqn_options{}, 1};
  auto next_new = torch::randn({4});
  EXPECT_TRUE(torch::equal(next_old, next_new));
  EXPECT_TRUE(torch::equal(l.online()->named_parameters()["0.weight"],
                           online.fc1->weight));
  EXPECT_TRUE(
    torch::equal(l.target()->named_parameters()["4.bias"], online.out->bias));
}

TEST(QNetwork, HasSequentialNamesAndAnyShape) {
  q_network net{11, 5, {32, 16, 8}};
  std::vector<std::string> names;
  for (auto& kvp : net->named_parameters())
    names.push_back(kvp.key());
  EXPECT_EQ(names,
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight",
                                      "2.bias", "4.weight", "4.bias",
                                      "6.weight", "6.bias"}));
  EXPECT_EQ(net->obs_dim(), 11);
  EXPECT_EQ(net->num_actions(), 5);
  EXPECT_EQ(net->hidden(), (std::vector<std::int64_t>{32, 16, 8}));
  EXPECT_EQ(net->forward(torch::randn({3, 11})).sizes(),
            (std::vector<std::int64_t>{3, 5}));
  // Greedy actions read the observations in place: argmax per row.
  std::vector<float> obs(2 * 11);
  for (std::size_t i = 0; i < obs.size(); ++i)
    obs[i] = static_cast<float>(i) * 0.1f;
  auto q = net->forward(torch::tensor(obs).reshape({2, 11}));
  auto want = q.argmax(1);
  auto got = greedy_actions(net, obs);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], want[0].item<std::int64_t>());
  EXPECT_EQ(got[1], want[1].item<std::int64_t>());
  std::mt19937_64 rng{1};
  auto explore = epsilon_greedy_actions(net, obs, 0.0, rng);
  EXPECT_EQ(explore, got); // eps 0: the greedy ones
}

TEST(TargetNetwork, HardAndSoftUpdates) {
  torch::manual_seed(1);
  q_network a{4, 2, {8, 8}};
  q_network b{4, 2, {8, 8}};
  ASSERT_FALSE(same_params(*a, *b));
  auto before = b->named_parameters()["0.weight"].clone();
  soft_update(*b, *a, 0.25);
  EXPECT_TRUE(
    torch::allclose(b->named_parameters()["0.weight"],
                    0.75 * before + 0.25 * a->named_parameters()["0.weight"]));
  hard_update(*b, *a);
  EXPECT_TRUE(same_params(*a, *b));
}

dqn_options small_options() {
  dqn_options opts;
  opts.hidden = {16, 16};
  opts.batch_size = 4;
  opts.replay.capacity = 64;
  opts.learning_starts = 4;
  return opts;
}

sample_batch hand_batch() {
  return {
    mat({0.1f, 0.2f, 0.3f, 0.4f, -0.1f, 0, 0.2f, 0, 0, 0, 0, 0, 1, 1, 1, 1}, 4),
    torch::tensor({0, 1, 1, 0}, torch::kLong),
    vec({1, 1, 1, 1}),
    torch::zeros({4, 4}),
    vec({0.99f, 0.99f, 0, 0.99f}),
    {},
    {}};
}

TEST(TargetNetwork, LearnerCopiesOnlineEveryKSteps) {
  torch::manual_seed(2);
  auto opts = small_options();
  opts.target_update_every = 3;
  dqn_learner l{q_network{4, 2, opts.hidden}, opts, 1};
  EXPECT_TRUE(same_params(*l.online(), *l.target()));
  auto b = hand_batch();
  l.update_on(b);
  EXPECT_FALSE(same_params(*l.online(), *l.target()));
  l.update_on(b);
  EXPECT_FALSE(same_params(*l.online(), *l.target()));
  l.update_on(b);
  EXPECT_TRUE(same_params(*l.online(), *l.target()));
  EXPECT_EQ(l.updates(), 3);
}

TEST(TargetNetwork, LearnerPolyakAveragesEveryStep) {
  torch::manual_seed(2);
  auto opts = small_options();
  opts.target_update_every = 0;
  opts.tau = 0.1;
  dqn_learner l{q_network{4, 2, opts.hidden}, opts, 1};
  // The target starts as the online net w0; after one step to w1 it is
  // 0.9 w0 + 0.1 w1.
  auto w0 = l.online()->named_parameters()["0.weight"].clone();
  l.update_on(hand_batch());
  auto w1 = l.online()->named_parameters()["0.weight"];
  auto t = l.target()->named_parameters()["0.weight"];
  EXPECT_GT((w1 - w0).abs().max().item<float>(), 1e-6f);
  EXPECT_TRUE(torch::allclose(t, 0.9 * w0 + 0.1 * w1));
  EXPECT_FALSE(torch::allclose(t, w1));
  EXPECT_FALSE(torch::allclose(t, w0));
}

TEST(Learner, FitsAFixedTarget) {
  // With discount 0 the target is the reward: the loss must fall.
  torch::manual_seed(3);
  auto opts = small_options();
  opts.lr = 1e-2;
  dqn_learner l{q_network{4, 2, opts.hidden}, opts, 1};
  sample_batch b{torch::randn({32, 4}),
                 torch::randint(0, 2, {32}, torch::kLong),
                 torch::randn({32}),
                 torch::randn({32, 4}),
                 torch::zeros({32}),
                 {},
                 {}};
  auto first = l.update_on(b);
  float last = first;
  for (int i = 0; i < 300; ++i)
    last = l.update_on(b);
  EXPECT_LT(last, first * 0.1f);
}

TEST(Learner, GradientHookRunsBeforeTheStepAndCanAbandonIt) {
  torch::manual_seed(4);
  auto opts = small_options();
  dqn_learner l{q_network{4, 2, opts.hidden}, opts, 1};
  auto before = l.online()->named_parameters()["0.weight"].clone();
  bool saw_grad = false;
  auto loss = l.update_on(hand_batch(), [&](torch::nn::Module& m) {
    saw_grad = m.named_parameters()["0.weight"].grad().defined();
    return false;
  });
  EXPECT_TRUE(saw_grad);
  EXPECT_TRUE(std::isnan(loss));
  EXPECT_EQ(l.updates(), 0);
  EXPECT_TRUE(torch::equal(l.online()->named_parameters()["0.weight"], before));
  // A hook that returns true lets the step happen.
  loss = l.update_on(hand_batch(), [](torch::nn::Module&) {
    return true;
  });
  EXPECT_FALSE(std::isnan(loss));
  EXPECT_EQ(l.updates(), 1);
  EXPECT_FALSE(
    torch::equal(l.online()->named_parameters()["0.weight"], before));
}

transition_batch random_batch(int n, std::int64_t dim, std::int64_t actions) {
  transition_batch xs;
  xs.obs_dim = dim;
  auto obs = torch::randn({n * dim});
  auto next = torch::randn({n * dim});
  xs.obs.assign(obs.data_ptr<float>(), obs.data_ptr<float>() + n * dim);
  xs.next_obs.assign(next.data_ptr<float>(), next.data_ptr<float>() + n * dim);
  for (int i = 0; i < n; ++i) {
    xs.action.push_back(i % actions);
    xs.reward.push_back(static_cast<float>(i % 3));
    xs.discount.push_back(i % 5 == 0 ? 0.0f : 0.9f);
  }
  return xs;
}

TEST(Learner, AddRefusesWhatTheNetworkCannotTake) {
  auto opts = small_options();
  dqn_learner l{q_network{11, 3, opts.hidden}, opts, 1};
  EXPECT_TRUE(
    dice::is(l.add(random_batch(4, 4, 3)), dice::errc::malformed_input));
  auto xs = random_batch(4, 11, 3);
  xs.action[2] = 3; // Discrete(3) has 0, 1, 2
  EXPECT_TRUE(dice::is(l.add(xs), dice::errc::malformed_input));
  EXPECT_EQ(l.buffer().size(), 0u);
  EXPECT_FALSE(l.ready());
  EXPECT_TRUE(std::isnan(l.update())); // empty buffer: no step
  EXPECT_EQ(l.updates(), 0);
  ASSERT_FALSE(l.add(random_batch(4, 11, 3)));
  EXPECT_TRUE(l.ready());
  EXPECT_FALSE(std::isnan(l.update()));
  EXPECT_EQ(l.updates(), 1);
}

TEST(Learner, PrioritizedStepWeighsTheLossAndUpdatesPriorities) {
  torch::manual_seed(5);
  auto opts = small_options();
  opts.batch_size = 16;
  opts.replay.prioritized = true;
  opts.replay.alpha = 0.6;
  opts.replay.beta = 0.4;
  opts.replay.priority_eps = 1e-3;
  dqn_learner l{q_network{11, 3, opts.hidden}, opts, 1};
  ASSERT_FALSE(l.add(random_batch(20, 11, 3)));
  // Uneven priorities, so that the weights are not all 1.
  std::vector<std::int64_t> all;
  std::vector<float> td;
  for (int i = 0; i < 20; ++i) {
    all.push_back(i);
    td.push_back(static_cast<float>(i));
  }
  ASSERT_FALSE(l.buffer().update_priorities(all, td));
  auto b = l.buffer().sample(16);
  ASSERT_GT((b.weights - 1).abs().max().item<float>(), 0.01f);
  // The loss and |TD| computed by hand with the nets before the step.
  torch::Tensor want_loss, want_td;
  {
    torch::NoGradGuard no_grad;
    auto target = td_target(b.reward, b.discount,
                            l.target()->forward(b.next_obs),
                            l.online()->forward(b.next_obs));
    auto q = l.online()
               ->forward(b.obs)
               .gather(1, b.action.unsqueeze(1))
               .squeeze(1);
    want_loss = (torch::smooth_l1_loss(q, target, torch::Reduction::None)
                 * b.weights)
                  .mean();
    want_td = (target - q).abs();
  }
  auto loss = l.update_on(b);
  EXPECT_NEAR(loss, want_loss.item<float>(), 1e-6);
  for (std::size_t k = 0; k < b.indices.size(); ++k) {
    auto want = std::pow(
      want_td[static_cast<std::int64_t>(k)].item<float>() + 1e-3, 0.6);
    EXPECT_NEAR(l.buffer().priority(static_cast<std::size_t>(b.indices[k])),
                want, 1e-5)
      << k;
  }
}

TEST(Learner, PrioritizedFitsAFixedTarget) {
  torch::manual_seed(6);
  auto opts = small_options();
  opts.lr = 1e-2;
  opts.batch_size = 32;
  opts.replay.prioritized = true;
  dqn_learner l{q_network{11, 3, opts.hidden}, opts, 2};
  auto xs = random_batch(64, 11, 3);
  std::fill(xs.discount.begin(), xs.discount.end(), 0.0f);
  ASSERT_FALSE(l.add(xs));
  auto first = l.update();
  float last = first;
  for (int i = 0; i < 300; ++i)
    last = l.update();
  EXPECT_LT(last, first * 0.1f);
}

TEST(DqnOptions, DefaultsPassAndBadValuesAreNamed) {
  EXPECT_FALSE(validate(dqn_options{}));
  auto bad = [](auto change) {
    dqn_options x;
    change(x);
    return dice::is(validate(x), dice::errc::invalid_config);
  };
  EXPECT_TRUE(bad([](auto& x) {
    x.hidden = {64, 0};
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.gamma = 1.5f;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.nstep = 0;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.lr = 0;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.batch_size = 0;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.target_update_every = 0;
    x.tau = 0;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.replay.capacity = 0;
  }));
}

TEST(Checkpoint, QNetworkSaveAndLoadRoundTrip) {
  auto dir = scratch_dir("rl_dqn_checkpoint");
  torch::manual_seed(4);
  q_network a{4, 2, {8, 8}};
  q_network b{4, 2, {8, 8}};
  auto path = (dir / "net.pt").string();
  ASSERT_FALSE(save_q_network(a, path));
  ASSERT_FALSE(load_q_network(b, path));
  EXPECT_TRUE(same_params(*a, *b));
  q_network wrong{4, 2, {16, 16}};
  auto before = wrong->named_parameters()["0.weight"].clone();
  EXPECT_TRUE(
    dice::is(load_q_network(wrong, path), dice::errc::model_mismatch));
  EXPECT_TRUE(torch::equal(wrong->named_parameters()["0.weight"], before));
  EXPECT_TRUE(dice::is(load_q_network(b, (dir / "none.pt").string()),
                       dice::errc::storage_missing));
}

// Trains a learner for a few steps on a seeded buffer.
void train(dqn_learner& l, int steps) {
  ASSERT_FALSE(l.add(random_batch(40, 11, 3)));
  for (int i = 0; i < steps; ++i)
    l.update();
}

void expect_same_state(dqn_learner& a, dqn_learner& b) {
  EXPECT_TRUE(same_params(*a.target(), *b.target()));
  EXPECT_EQ(a.updates(), b.updates());
  EXPECT_EQ(a.buffer().size(), b.buffer().size());
  for (std::size_t i = 0; i < a.buffer().capacity(); ++i)
    EXPECT_DOUBLE_EQ(a.buffer().priority(i), b.buffer().priority(i)) << i;
  // With the same online weights, one step on the same batch must land on
  // the same weights: Adam's moments and step counts came over.
  hard_update(*b.online(), *a.online());
  auto batch = a.buffer().sample(8);
  batch.indices.clear(); // keep the priorities out of it
  EXPECT_EQ(a.update_on(batch), b.update_on(batch));
  EXPECT_TRUE(same_params(*a.online(), *b.online()));
}

TEST(Checkpoint, LearnerStateRoundTrip) {
  auto dir = scratch_dir("rl_dqn_learner_state");
  for (bool prioritized : {false, true}) {
    torch::manual_seed(8);
    auto opts = small_options();
    opts.replay.prioritized = prioritized;
    opts.target_update_every = 0; // Polyak: target differs from online
    dqn_learner a{q_network{11, 3, opts.hidden}, opts, 1};
    train(a, 5);
    auto path = (dir / "learner.pt").string();
    ASSERT_FALSE(a.save_state(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    dqn_learner b{q_network{11, 3, opts.hidden}, opts, 2};
    ASSERT_FALSE(same_params(*a.target(), *b.target()));
    ASSERT_FALSE(b.load_state(path)) << prioritized;
    expect_same_state(a, b);
  }
}

TEST(Checkpoint, LearnerStateThatDoesNotFitChangesNothing) {
  auto dir = scratch_dir("rl_dqn_learner_misfit");
  torch::manual_seed(9);
  auto opts = small_options();
  dqn_learner a{q_network{11, 3, opts.hidden}, opts, 1};
  train(a, 3);
  auto path = (dir / "learner.pt").string();
  ASSERT_FALSE(a.save_state(path));
  auto check = [&](dqn_options o, const std::string& file, dice::errc code) {
    dqn_learner b{q_network{11, 3, o.hidden}, o, 1};
    auto target = b.target()->named_parameters()["0.weight"].clone();
    EXPECT_TRUE(dice::is(b.load_state(file), code)) << file;
    EXPECT_TRUE(
      torch::equal(b.target()->named_parameters()["0.weight"], target));
    EXPECT_EQ(b.updates(), 0);
    EXPECT_EQ(b.buffer().size(), 0u);
    EXPECT_TRUE(b.optimizer().state().empty());
  };
  auto wide = opts;
  wide.hidden = {32, 16};
  check(wide, path, dice::errc::model_mismatch);
  auto big = opts;
  big.replay.capacity = 128;
  check(big, path, dice::errc::model_mismatch);
  check(opts, (dir / "none.pt").string(), dice::errc::storage_missing);
  auto garbage = (dir / "garbage.pt").string();
  std::ofstream{garbage} << "not an archive";
  check(opts, garbage, dice::errc::malformed_input);
}

} // namespace
