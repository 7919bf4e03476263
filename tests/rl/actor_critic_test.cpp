// The actor-critic for Discrete and Box actions: today's CartPole network
// (a copy of examples/ppo_cartpole's module is kept here) gets the same
// initial weights for the same torch seed; act, evaluate and mode agree
// with the distributions; unusable spaces are error values.

#include "dice/core/errc.hpp"
#include "dice/rl/actor_critic.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace dice::rl;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

// -- examples/ppo_cartpole's actor_critic, verbatim but for the names --------

torch::nn::Linear old_linear(std::int64_t in, std::int64_t out, double gain) {
  torch::nn::Linear l{in, out};
  torch::NoGradGuard no_grad;
  torch::nn::init::orthogonal_(l->weight, gain);
  l->bias.zero_();
  return l;
}

struct old_actor_critic_impl : torch::nn::Module {
  explicit old_actor_critic_impl(std::int64_t hidden) {
    auto g = std::sqrt(2.0);
    pi1 = register_module("pi1", old_linear(4, hidden, g));
    pi2 = register_module("pi2", old_linear(hidden, hidden, g));
    pi_out = register_module("pi_out", old_linear(hidden, 2, 0.01));
    v1 = register_module("v1", old_linear(4, hidden, g));
    v2 = register_module("v2", old_linear(hidden, hidden, g));
    v_out = register_module("v_out", old_linear(hidden, 1, 1.0));
  }
  torch::Tensor logits(const torch::Tensor& obs) {
    return pi_out(torch::tanh(pi2(torch::tanh(pi1(obs)))));
  }
  torch::Tensor value(const torch::Tensor& obs) {
    return v_out(torch::tanh(v2(torch::tanh(v1(obs))))).squeeze(1);
  }
  torch::nn::Linear pi1{nullptr}, pi2{nullptr}, pi_out{nullptr};
  torch::nn::Linear v1{nullptr}, v2{nullptr}, v_out{nullptr};
};
TORCH_MODULE_IMPL(old_actor_critic, old_actor_critic_impl);

// ----------------------------------------------------------------------------

dice::space cartpole_obs() {
  return dice::space::box({4}, -inf, inf);
}

TEST(ActorCritic, InitialWeightsEqualTheDemoNetworkForTheSameSeed) {
  for (std::uint64_t seed : {1, 7, 123}) {
    torch::manual_seed(seed);
    old_actor_critic old{64};
    torch::manual_seed(seed);
    actor_critic net{cartpole_obs(), dice::space::discrete(2)};
    auto p = net->named_parameters();
    // Old name -> new name (PyTorch's nn.Sequential indices).
    std::vector<std::pair<std::string, std::string>> names{
      {"pi1", "pi.0"}, {"pi2", "pi.2"}, {"pi_out", "pi.4"},
      {"v1", "v.0"},   {"v2", "v.2"},   {"v_out", "v.4"}};
    auto q = old->named_parameters();
    ASSERT_EQ(p.size(), q.size());
    for (auto& [o, n] : names)
      for (auto kind : {".weight", ".bias"}) {
        auto* a = p.find(n + kind);
        auto* b = q.find(o + kind);
        ASSERT_TRUE(a != nullptr && b != nullptr) << n << kind;
        EXPECT_TRUE(torch::equal(*a, *b)) << "seed " << seed << " " << n;
      }
    // ... and so the same outputs.
    auto x = torch::randn({8, 4});
    EXPECT_TRUE(torch::allclose(net->policy_out(x), old->logits(x)));
    EXPECT_TRUE(torch::allclose(net->value(x), old->value(x)));
  }
}

TEST(ActorCritic, ADifferentSeedGivesOtherWeights) {
  torch::manual_seed(1);
  actor_critic a{cartpole_obs(), dice::space::discrete(2)};
  torch::manual_seed(2);
  actor_critic b{cartpole_obs(), dice::space::discrete(2)};
  EXPECT_FALSE(torch::equal(a->named_parameters()["pi.0.weight"],
                            b->named_parameters()["pi.0.weight"]));
}

TEST(ActorCritic, BoxActionsHaveALearnableLogStd) {
  actor_critic_options o;
  o.hidden = {256, 256};
  o.log_std_init = -0.5;
  actor_critic net{dice::space::box({3}, -inf, inf),
                   dice::space::box({2}, -2.0f, 2.0f), o};
  EXPECT_FALSE(net->discrete());
  EXPECT_EQ(net->obs_dim(), 3);
  EXPECT_EQ(net->act_dim(), 2);
  auto p = net->named_parameters();
  ASSERT_TRUE(p.find("log_std") != nullptr);
  EXPECT_TRUE(torch::equal(p["log_std"], torch::full({2}, -0.5f)));
  EXPECT_EQ(p["pi.0.weight"].sizes(), (std::vector<std::int64_t>{256, 3}));
  EXPECT_EQ(p["pi.4.weight"].sizes(), (std::vector<std::int64_t>{2, 256}));
  EXPECT_EQ(p["v.4.weight"].sizes(), (std::vector<std::int64_t>{1, 256}));
  // The small head (gain 0.01) starts the means near 0.
  auto x = torch::randn({16, 3});
  EXPECT_LT(net->policy_out(x).abs().max().item<float>(), 0.1f);
}

TEST(ActorCritic, ActSamplesDiscreteActionsAndScoresThem) {
  torch::manual_seed(3);
  actor_critic net{cartpole_obs(), dice::space::discrete(3),
                   actor_critic_options{{16}, 0.0}};
  auto x = torch::randn({32, 4});
  std::mt19937_64 gen{5};
  auto r = net->act(x, gen);
  ASSERT_EQ(r.actions.dtype(), torch::kLong);
  ASSERT_EQ(r.actions.size(0), 32);
  EXPECT_GE(r.actions.min().item<std::int64_t>(), 0);
  EXPECT_LE(r.actions.max().item<std::int64_t>(), 2);
  EXPECT_FALSE(r.log_prob.requires_grad());
  // The same draws as the distribution's own sampling with the same seed.
  std::mt19937_64 again{5};
  auto d = net->categorical_policy(x);
  EXPECT_TRUE(torch::equal(d.sample(again), r.actions));
  EXPECT_TRUE(torch::allclose(r.log_prob, d.log_prob(r.actions)));
  EXPECT_TRUE(torch::allclose(r.value, net->value(x)));
  auto e = net->evaluate(x, r.actions);
  EXPECT_TRUE(e.log_prob.requires_grad());
  EXPECT_TRUE(torch::allclose(e.log_prob, r.log_prob));
  EXPECT_TRUE(torch::allclose(e.entropy, d.entropy()));
  EXPECT_TRUE(torch::equal(net->mode(x), d.log_probs().argmax(1)));
}

TEST(ActorCritic, ActSamplesUnclippedBoxActions) {
  torch::manual_seed(3);
  actor_critic_options o;
  o.log_std_init = 1.0; // sigma e: many draws fall outside [-1, 1]
  actor_critic net{cartpole_obs(), dice::space::box({2}, -1.0f, 1.0f), o};
  auto x = torch::randn({64, 4});
  std::mt19937_64 gen{9};
  auto r = net->act(x, gen);
  ASSERT_EQ(r.actions.sizes(), (std::vector<std::int64_t>{64, 2}));
  EXPECT_GT(r.actions.abs().max().item<float>(), 1.0f);
  auto d = net->gaussian_policy(x);
  EXPECT_TRUE(torch::allclose(r.log_prob, d.log_prob(r.actions)));
  // evaluate: gradients reach the log_std.
  auto e = net->evaluate(x, r.actions);
  (e.log_prob.sum() + e.entropy.sum()).backward();
  EXPECT_GT(net->log_std.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(torch::allclose(net->mode(x), d.mean()));
}

TEST(ActorCritic, UnusableSpacesAreErrorValues) {
  auto box = dice::space::box({2}, -1.0f, 1.0f);
  auto bad_obs = make_actor_critic(dice::space::discrete(4), box);
  ASSERT_FALSE(bad_obs);
  EXPECT_TRUE(dice::is(bad_obs.error(), dice::errc::invalid_config));
  EXPECT_FALSE(make_actor_critic(box, dice::space::discrete(0)));
  EXPECT_FALSE(make_actor_critic(box, dice::space::box({0}, -1.0f, 1.0f)));
  EXPECT_FALSE(make_actor_critic(box, box, actor_critic_options{{64, 0}, 0}));
  auto ok = make_actor_critic(box, dice::space::discrete(2));
  ASSERT_TRUE(ok) << dice::render(ok.error());
  EXPECT_TRUE((*ok)->discrete());
  EXPECT_THROW((actor_critic{dice::space::discrete(4), box}),
               std::invalid_argument);
}

TEST(ActorCritic, CopyWeights) {
  torch::manual_seed(1);
  actor_critic a{cartpole_obs(), dice::space::box({2}, -1.0f, 1.0f)};
  torch::manual_seed(2);
  actor_critic b{cartpole_obs(), dice::space::box({2}, -1.0f, 1.0f)};
  {
    torch::NoGradGuard ng;
    a->log_std.fill_(0.3f);
  }
  copy_weights(b, a);
  for (auto& kv : a->named_parameters())
    EXPECT_TRUE(torch::equal(kv.value(), b->named_parameters()[kv.key()]))
      << kv.key();
}

} // namespace
