// GAE(lambda) and V-trace on hand-computed cases, and V-trace at lag 0
// (behaviour policy == target policy) against the on-policy targets:
// lambda-returns (V + GAE) and, with lambda = 1, the n-step returns to the
// end of each segment. Moved from tests/ppo (torch-free code; the binary
// links dice::rl).

#include "dice/core/errc.hpp"
#include "dice/rl/returns.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

using namespace dice::rl;

namespace {

// The value of a computation that must succeed (an error throws, which
// GoogleTest reports as a failure of the test).
template <class T>
T ok(caf::expected<T> x) {
  if (!x)
    throw std::runtime_error(dice::render(x.error()));
  return std::move(*x);
}

// Two trajectories in one flattened list: A (3 steps, ends at a segment
// end, bootstraps) and B (2 steps, terminates).
return_inputs two_trajectories() {
  return_inputs in;
  in.value = {0.5f, 0.4f, 0.3f, 1.0f, 2.0f};
  in.next_value = {0.4f, 0.3f, 0.2f, 2.0f, 5.0f};
  in.reward = {1, 1, 1, 1, 2};
  in.terminated = {0, 0, 0, 0, 1};
  in.traj_flag = {0, 0, 1, 0, 1};
  return in;
}

TEST(Gae, HandComputedTwoTrajectories) {
  // gamma 0.9, lambda 0.8 (gamma * lambda = 0.72):
  //   d2 = 1 + 0.9 * 0.2 - 0.3 = 0.88              A2 = 0.88
  //   d1 = 1 + 0.9 * 0.3 - 0.4 = 0.87              A1 = 0.87 + 0.72 * 0.88
  //   d0 = 1 + 0.9 * 0.4 - 0.5 = 0.86              A0 = 0.86 + 0.72 * A1
  //   d4 = 2 + 0 (terminated) - 2 = 0              A4 = 0
  //   d3 = 1 + 0.9 * 2 - 1 = 1.8                   A3 = 1.8 + 0.72 * 0
  // A2 must not see B's advantage (traj_flag at 2).
  auto a = ok(gae(two_trajectories(), 0.9f, 0.8f));
  ASSERT_EQ(a.size(), 5u);
  EXPECT_NEAR(a[0], 1.942592, 1e-5);
  EXPECT_NEAR(a[1], 1.5036, 1e-5);
  EXPECT_NEAR(a[2], 0.88, 1e-6);
  EXPECT_NEAR(a[3], 1.8, 1e-6);
  EXPECT_NEAR(a[4], 0.0, 1e-6);
}

TEST(Gae, TruncationBootstrapsButEndsTheTrajectory) {
  // One step truncated (flag set, not terminated): r + gamma V(next) - V.
  return_inputs in;
  in.value = {1, 1};
  in.next_value = {3, 1};
  in.reward = {1, 1};
  in.terminated = {0, 0};
  in.traj_flag = {1, 1};
  auto a = ok(gae(in, 0.5f, 1.0f));
  EXPECT_NEAR(a[0], 1 + 0.5 * 3 - 1, 1e-6);
  EXPECT_NEAR(a[1], 1 + 0.5 * 1 - 1, 1e-6);
}

TEST(Gae, RefusesInputsOfDifferentLengths) {
  auto in = two_trajectories();
  in.reward.pop_back();
  auto r = gae(in, 0.9f, 0.9f);
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::invalid_config));
  in = two_trajectories();
  auto v = vtrace(in, {0, 0}, vtrace_options{});
  ASSERT_FALSE(v);
  EXPECT_TRUE(dice::is(v.error(), dice::errc::invalid_config));
}

TEST(Vtrace, HandComputedWithClippedWeights) {
  // One trajectory of 3 steps, gamma 0.9, lambda 1, rho_bar = c_bar = 1;
  // pi/mu = 0.5, 2 (clipped to 1), 0.25:
  //   d2 = 0.25 (1 + 0.9*4 - 3) = 0.4    v2 = 3 + 0.4 = 3.4
  //   d1 = 1 (1 + 0.9*3 - 2) = 1.7       v1 = 2 + 1.7 + 0.9 * 1 * 0.4 = 4.06
  //   d0 = 0.5 (1 + 0.9*2 - 1) = 0.9     v0 = 1 + 0.9 + 0.9 * 0.5 * 2.06
  //                                         = 2.827
  // (IMPALA eq. 1: v0 = V + d0 + g c0 d1 + g^2 c0 c1 d2 = 1 + 0.9 + 0.765
  // + 0.162.) pg advantages rho_t (r + g v_{t+1} - V), v_3 = V(next_2) = 4:
  //   pg2 = 0.25 (1 + 3.6 - 3) = 0.4, pg1 = 1 (1 + 0.9 * 3.4 - 2) = 2.06,
  //   pg0 = 0.5 (1 + 0.9 * 4.06 - 1) = 1.827.
  return_inputs in;
  in.value = {1, 2, 3};
  in.next_value = {2, 3, 4};
  in.reward = {1, 1, 1};
  in.terminated = {0, 0, 0};
  in.traj_flag = {0, 0, 1};
  std::vector<float> log_rho = {std::log(0.5f), std::log(2.0f),
                                std::log(0.25f)};
  vtrace_options o;
  o.gamma = 0.9f;
  o.lambda = 1.0f;
  auto r = ok(vtrace(in, log_rho, o));
  EXPECT_NEAR(r.vs[2], 3.4, 1e-5);
  EXPECT_NEAR(r.vs[1], 4.06, 1e-5);
  EXPECT_NEAR(r.vs[0], 2.827, 1e-5);
  EXPECT_NEAR(r.pg_adv[2], 0.4, 1e-5);
  EXPECT_NEAR(r.pg_adv[1], 2.06, 1e-5);
  EXPECT_NEAR(r.pg_adv[0], 1.827, 1e-5);
  // Unclipped (rho_bar = c_bar = 2): the weight 2 at t = 1 counts whole.
  o.rho_bar = o.c_bar = o.pg_rho_bar = 2;
  auto u = ok(vtrace(in, log_rho, o));
  //   d1 = 2 * 1.7 = 3.4, v1 = 2 + 3.4 + 0.9 * 2 * 0.4 = 6.12
  EXPECT_NEAR(u.vs[1], 6.12, 1e-5);
}

TEST(Vtrace, TerminationStopsTheTraceAndTheBootstrap) {
  return_inputs in;
  in.value = {1, 1};
  in.next_value = {1, 100};
  in.reward = {1, 1};
  in.terminated = {0, 1};
  in.traj_flag = {0, 1};
  auto r = ok(vtrace(in, {0, 0}, vtrace_options{}));
  EXPECT_NEAR(r.vs[1], 1.0, 1e-6); // V + (1 + 0 - 1)
  EXPECT_NEAR(r.pg_adv[1], 0.0, 1e-6);
}

// Random segments with terminations, truncations and segment ends.
return_inputs random_inputs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<float> v{-2, 2};
  std::bernoulli_distribution end{0.15}, term{0.5};
  return_inputs in;
  for (std::size_t i = 0; i < n; ++i) {
    in.value.push_back(v(rng));
    in.reward.push_back(v(rng));
    bool last = i + 1 == n || end(rng);
    bool t = last && term(rng);
    in.terminated.push_back(t ? 1 : 0);
    in.traj_flag.push_back(last ? 1 : 0);
  }
  // Within a trajectory next_obs is the next obs: same value.
  for (std::size_t i = 0; i < n; ++i)
    in.next_value.push_back(in.traj_flag[i] ? v(rng) : in.value[i + 1]);
  return in;
}

TEST(Vtrace, AtLagZeroTargetsAreTheLambdaReturns) {
  auto in = random_inputs(200, 42);
  std::vector<float> zero(in.value.size(), 0.0f);
  for (float lambda : {0.0f, 0.8f, 0.95f, 1.0f}) {
    for (float rho_bar : {1.0f, 3.0f}) {
      vtrace_options o;
      o.gamma = 0.97f;
      o.lambda = lambda;
      o.rho_bar = o.c_bar = o.pg_rho_bar = rho_bar;
      auto r = ok(vtrace(in, zero, o));
      auto a = ok(gae(in, o.gamma, lambda));
      for (std::size_t t = 0; t < a.size(); ++t) {
        // v_s = V + GAE(lambda): the lambda-return.
        ASSERT_NEAR(r.vs[t], in.value[t] + a[t], 1e-4)
          << "t " << t << " lambda " << lambda;
        // pg advantage = r + gamma G^lambda_{t+1} - V (bootstrap at the end).
        float disc = in.terminated[t] ? 0.0f : o.gamma;
        float next = in.traj_flag[t] ? in.next_value[t] : r.vs[t + 1];
        ASSERT_NEAR(r.pg_adv[t], in.reward[t] + disc * next - in.value[t],
                    1e-4);
      }
    }
  }
}

TEST(Vtrace, AtLagZeroWithLambdaOneTargetsAreTheNStepReturns) {
  auto in = random_inputs(150, 7);
  std::vector<float> zero(in.value.size(), 0.0f);
  vtrace_options o;
  o.gamma = 0.9f;
  o.lambda = 1.0f;
  auto r = ok(vtrace(in, zero, o));
  // n-step return computed forward, step by step: discounted rewards to the
  // trajectory's end, plus the discounted bootstrap there unless terminated.
  for (std::size_t s = 0; s < in.value.size(); ++s) {
    double g = 0, k = 1;
    std::size_t t = s;
    for (;; ++t) {
      g += k * in.reward[t];
      if (in.traj_flag[t])
        break;
      k *= o.gamma;
    }
    if (!in.terminated[t])
      g += k * o.gamma * in.next_value[t];
    ASSERT_NEAR(r.vs[s], g, 1e-4) << "step " << s;
    // ... and so is the pg advantage plus V.
    ASSERT_NEAR(r.pg_adv[s] + in.value[s], g, 1e-4) << "step " << s;
  }
}

} // namespace
