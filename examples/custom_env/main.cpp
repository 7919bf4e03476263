// custom_env: the template for training your own environment with dice (a
// point mass that must reach a goal with a continuous force, trained by
// PPO). Copy this folder, replace point_goal with your env, keep main().
//
//   custom_env --collectors=4                 # one process
//   dice-launch --workers 6 -- custom_env     # 6 processes
//   custom_env --eval-only=runs/custom_env/best.pt
//
// Writes OUT/metrics.jsonl, summary.json, eval_return.png, latest.pt and
// best.pt (docs/getting-started.md walks through it).

#include <dice/dice.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

namespace {

/// A point mass that must come to rest on a goal. Observation: position,
/// velocity and goal [x, y, vx, vy, gx, gy]; action: a force in [-1, 1]^2;
/// reward: minus the distance to the goal, minus a little for the force.
/// 100 steps per episode, no terminal state.
class point_goal : public dice::env {
 public:
  std::string name() const override {
    return "PointGoal";
  }

  dice::space observation_space() const override {
    return dice::space::box({6}, -2.0f, 2.0f);
  }

  dice::space action_space() const override {
    return dice::space::box({2}, -1.0f, 1.0f);
  }

  void reset(std::optional<std::uint64_t> seed, float* obs) override {
    if (seed)
      rng_.seed(*seed);
    std::uniform_real_distribution<float> u{-1.0f, 1.0f};
    for (int i = 0; i < 2; ++i) {
      pos_[i] = u(rng_);
      goal_[i] = u(rng_);
      vel_[i] = 0;
    }
    observe(obs);
  }

  dice::step_result step(const dice::action_view& a, float* obs) override {
    float cost = 0;
    for (int i = 0; i < 2; ++i) {
      auto f = std::clamp(a.values[i], -1.0f, 1.0f);
      vel_[i] = std::clamp(0.9f * vel_[i] + 0.1f * f, -1.0f, 1.0f);
      pos_[i] = std::clamp(pos_[i] + 0.1f * vel_[i], -2.0f, 2.0f);
      cost += 0.01f * f * f;
    }
    observe(obs);
    auto dist = std::hypot(pos_[0] - goal_[0], pos_[1] - goal_[1]);
    return {-dist - cost, false, false};
  }

  std::int64_t max_episode_steps() const override {
    return 100;
  }

 private:
  void observe(float* obs) const {
    std::copy_n(pos_, 2, obs);
    std::copy_n(vel_, 2, obs + 2);
    std::copy_n(goal_, 2, obs + 4);
  }

  std::mt19937_64 rng_;
  float pos_[2] = {0, 0}, vel_[2] = {0, 0}, goal_[2] = {0, 0};
};

/// The program's options: dice::rl's common ones (seed, collectors, limits,
/// output folder, ...), PPO's (--lr, --epochs, --vtrace, ...) and the env.
struct config : dice::rl::ppo_run_config {
  config() {
    make_env = [](std::size_t) {
      return std::make_unique<point_goal>();
    };
    title = "PPO PointGoal";
    out = "runs/custom_env";
    stop_value = -15; // the goal reached and held from about step 20
  }
};

} // namespace

int main(int argc, char** argv) {
  return dice::run<config>(argc, argv,
                           [](dice::node_setup& n, const config& cfg) {
                             dice::rl::use_ppo(n, cfg);
                           });
}
