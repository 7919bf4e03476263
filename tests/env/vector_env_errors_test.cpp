// A bad action or an env that throws becomes an error value naming the env
// and both step counts. Under reset_env only that env's episode ends (failed,
// truncated) and the batch goes on; under stop step() returns the error and
// the vector waits for reset(). The other envs' steps are never lost.

#include "dice/env/vector_env.hpp"

#include "scripted_env.hpp"
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

using dice::autoreset;
using dice::env_error_policy;
using dice::errc;
using dice::vector_env;
using dice::test::make_scripted;
using dice::test::row;
using dice::test::script;
using dice::test::scripted;
using dice::test::scripted_env;

namespace {

using obs2 = std::vector<float>;
using flags = std::vector<std::uint8_t>;

dice::vector_env_options policy(env_error_policy p,
                                autoreset mode = autoreset::same_step) {
  return {mode, p};
}

// Three envs; step 1 is fine, step 2 gives env 1 the action 7.
struct bad_discrete_action {
  vector_env v;
  caf::error err;

  explicit bad_discrete_action(env_error_policy p,
                               autoreset mode = autoreset::same_step)
    : v(make_scripted({script{}, script{}, script{}}, policy(p, mode))) {
    EXPECT_FALSE(v.reset());
    EXPECT_FALSE(v.step(std::vector<std::int64_t>{1, 1, 1}));
    err = v.step(std::vector<std::int64_t>{2, 7, 0});
  }
};

constexpr auto bad_action_text = "invalid_action: env 1 (scripted): action 7 "
                                 "outside Discrete(3) at step 2 "
                                 "of its episode (vector step 2)";

TEST(VectorEnvErrors, BadDiscreteActionResetsOnlyThatEnv) {
  bad_discrete_action x{env_error_policy::reset_env};
  auto& v = x.v;
  EXPECT_FALSE(x.err); // the batch went on
  EXPECT_EQ(v.errors(), 1u);
  EXPECT_TRUE(dice::is(v.last_error(), errc::invalid_action));
  EXPECT_EQ(dice::render(v.last_error()), bad_action_text);
  // Env 1: episode ended as failed and truncated, reset in the same step.
  EXPECT_EQ(v.failed(), (flags{0, 1, 0}));
  EXPECT_EQ(v.truncated(), (flags{0, 1, 0}));
  EXPECT_EQ(v.terminated(), (flags{0, 0, 0}));
  EXPECT_EQ(v.rewards()[1], 0.0f);
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 0}));
  EXPECT_EQ(row(v.final_obs(), 1), (obs2{1, 1})); // the last valid one
  EXPECT_EQ(scripted(v, 1).step_calls, 1);        // never saw the action
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_EQ(v.episodes()[0].env, 1u);
  EXPECT_EQ(v.episodes()[0].ret, 11.0);
  EXPECT_EQ(v.episodes()[0].length, 1);
  EXPECT_TRUE(v.episodes()[0].failed);
  EXPECT_FALSE(v.episodes()[0].terminated);
  // The others stepped as if nothing happened.
  EXPECT_EQ(row(v.obs(), 0), (obs2{1, 2}));
  EXPECT_EQ(row(v.obs(), 2), (obs2{1, 2}));
  EXPECT_EQ(v.rewards()[0], 22.0f);
  EXPECT_EQ(v.rewards()[2], 20.0f);
  // And the next batch is whole again.
  EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(v.failed(), (flags{0, 0, 0}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 1}));
  EXPECT_EQ(v.errors(), 1u);
}

TEST(VectorEnvErrors, BadDiscreteActionUnderStopReturnsTheError) {
  bad_discrete_action x{env_error_policy::stop};
  auto& v = x.v;
  EXPECT_TRUE(dice::is(x.err, errc::invalid_action));
  EXPECT_EQ(dice::render(x.err), bad_action_text);
  EXPECT_EQ(v.errors(), 1u);
  EXPECT_TRUE(v.stopped());
  // The rest of the batch was stepped; env 1 was not reset.
  EXPECT_EQ(row(v.obs(), 0), (obs2{1, 2}));
  EXPECT_EQ(row(v.obs(), 2), (obs2{1, 2}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{1, 1}));
  EXPECT_EQ(v.failed(), (flags{0, 1, 0}));
  EXPECT_EQ(scripted(v, 1).reset_calls, 1);
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_TRUE(v.episodes()[0].failed);
  // Unusable until reset().
  auto again = v.step(std::vector<std::int64_t>{0, 0, 0});
  EXPECT_TRUE(dice::is(again, errc::env_failed));
  EXPECT_NE(dice::render(again).find("reset()"), std::string::npos);
  EXPECT_EQ(scripted(v, 0).step_calls, 2);
  EXPECT_FALSE(v.reset());
  EXPECT_FALSE(v.stopped());
  EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 1}));
}

TEST(VectorEnvErrors, BadActionInNextStepModeResetsOnTheFollowingStep) {
  bad_discrete_action x{env_error_policy::reset_env, autoreset::next_step};
  auto& v = x.v;
  EXPECT_FALSE(x.err);
  EXPECT_EQ(v.failed()[1], 1);
  EXPECT_EQ(v.truncated()[1], 1);
  EXPECT_EQ(row(v.obs(), 1), (obs2{1, 1})); // the last valid observation
  EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 0}));
  EXPECT_EQ(v.rewards()[1], 0.0f);
  EXPECT_EQ(v.failed()[1], 0);
}

// One env with Box(-1, 1, (2,)) actions, stepped once with `action`.
struct bad_box_action {
  vector_env v;
  caf::error err;

  bad_box_action(env_error_policy p, std::vector<float> action)
    : v(make_scripted({[] {
                        script s;
                        s.box_actions = true;
                        return s;
                      }()},
                      policy(p))) {
    EXPECT_FALSE(v.reset());
    err = v.step(action);
  }
};

TEST(VectorEnvErrors, NanBoxActionIsAnError) {
  auto text = "invalid_action: env 0 (scripted): action[1] = nan outside "
              "Box(-1.0, 1.0, (2,), float32) at step 1 of its episode (vector "
              "step 1)";
  bad_box_action keep{env_error_policy::reset_env, {0.5f, std::nanf("")}};
  EXPECT_FALSE(keep.err);
  EXPECT_EQ(dice::render(keep.v.last_error()), text);
  EXPECT_EQ(keep.v.failed()[0], 1);
  EXPECT_EQ(row(keep.v.obs(), 0), (obs2{2, 0}));
  EXPECT_EQ(scripted(keep.v, 0).step_calls, 0);
  bad_box_action stop{env_error_policy::stop, {0.5f, std::nanf("")}};
  EXPECT_EQ(dice::render(stop.err), text);
  EXPECT_TRUE(stop.v.stopped());
}

TEST(VectorEnvErrors, OutOfBoundsBoxActionIsAnError) {
  auto text = "invalid_action: env 0 (scripted): action[0] = 1.5 outside "
              "Box(-1.0, 1.0, (2,), float32) at step 1 of its episode (vector "
              "step 1)";
  bad_box_action keep{env_error_policy::reset_env, {1.5f, 0}};
  EXPECT_FALSE(keep.err);
  EXPECT_EQ(keep.v.errors(), 1u);
  EXPECT_EQ(dice::render(keep.v.last_error()), text);
  bad_box_action stop{env_error_policy::stop, {1.5f, 0}};
  EXPECT_EQ(dice::render(stop.err), text);
  // The bounds themselves are inside.
  bad_box_action edge{env_error_policy::stop, {-1.0f, 1.0f}};
  EXPECT_FALSE(edge.err);
  EXPECT_EQ(edge.v.rewards()[0], 9.0f); // 10 * 1 - 1
}

// Two envs; env 1 throws in step 3 of its first episode.
struct throwing_step {
  vector_env v;
  caf::error err;

  explicit throwing_step(env_error_policy p)
    : v(make_scripted({script{},
                       [] {
                         script s;
                         s.throw_step_at = 3;
                         return s;
                       }()},
                      policy(p))) {
    EXPECT_FALSE(v.reset());
    for (int t = 0; t < 2; ++t)
      EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0}));
    err = v.step(std::vector<std::int64_t>{1, 1});
  }
};

constexpr auto step_threw_text = "env_failed: env 1 (scripted): step threw "
                                 "\"step boom\" at step 3 of its "
                                 "episode (vector step 3)";

TEST(VectorEnvErrors, EnvThrowingInStepIsResetUnderResetEnv) {
  throwing_step x{env_error_policy::reset_env};
  auto& v = x.v;
  EXPECT_FALSE(x.err);
  EXPECT_EQ(v.errors(), 1u);
  EXPECT_EQ(dice::render(v.last_error()), step_threw_text);
  EXPECT_EQ(v.failed(), (flags{0, 1}));
  // What the throwing step scribbled (-999) does not leak out.
  EXPECT_EQ(row(v.final_obs(), 1), (obs2{1, 2}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 0}));
  EXPECT_EQ(row(v.obs(), 0), (obs2{1, 3}));
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_EQ(v.episodes()[0].length, 2);
  EXPECT_EQ(v.episodes()[0].ret, 30.0); // 10 + 20
  EXPECT_EQ(v.total_steps(), 5u);       // the failed step is none
  EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{2, 1}));
}

TEST(VectorEnvErrors, EnvThrowingInStepStopsUnderStop) {
  throwing_step x{env_error_policy::stop};
  EXPECT_TRUE(dice::is(x.err, errc::env_failed));
  EXPECT_EQ(dice::render(x.err), step_threw_text);
  EXPECT_TRUE(x.v.stopped());
  EXPECT_EQ(row(x.v.obs(), 0), (obs2{1, 3}));
  EXPECT_EQ(row(x.v.final_obs(), 1), (obs2{1, 2}));
}

// One env that terminates every step; reset call `on` throws `times` times.
vector_env failing_reset(env_error_policy p, int on, int times) {
  script s;
  s.terminate_at = 1;
  s.throw_reset_on = on;
  s.throw_reset_times = times;
  return make_scripted({s, script{}}, policy(p));
}

TEST(VectorEnvErrors, AutoResetThrowingOnceIsRetriedUnderResetEnv) {
  auto v = failing_reset(env_error_policy::reset_env, 2, 1);
  ASSERT_FALSE(v.reset());
  EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(v.errors(), 1u);
  EXPECT_EQ(dice::render(v.last_error()),
            "env_failed: env 0 (scripted): reset threw \"reset boom\" (vector "
            "step 1)");
  EXPECT_EQ(scripted(v, 0).reset_calls, 3);
  EXPECT_EQ(row(v.obs(), 0), (obs2{2, 0}));
  EXPECT_EQ(v.failed()[0], 1);
  EXPECT_EQ(v.terminated()[0], 1); // the episode itself ended normally
  EXPECT_FALSE(v.stopped());
}

TEST(VectorEnvErrors, AutoResetThrowingStopsUnderStop) {
  auto v = failing_reset(env_error_policy::stop, 2, 1);
  ASSERT_FALSE(v.reset());
  auto err = v.step(std::vector<std::int64_t>{0, 0});
  EXPECT_TRUE(dice::is(err, errc::env_failed));
  EXPECT_TRUE(v.stopped());
  EXPECT_EQ(scripted(v, 0).reset_calls, 2); // no retry
  EXPECT_EQ(row(v.final_obs(), 0), (obs2{1, 1}));
  EXPECT_EQ(row(v.obs(), 1), (obs2{1, 1})); // env 1 stepped
  ASSERT_EQ(v.episodes().size(), 1u);       // env 0's finished episode
  EXPECT_TRUE(v.episodes()[0].terminated);
}

TEST(VectorEnvErrors, ResetThrowingTwiceStopsEvenUnderResetEnv) {
  auto v = failing_reset(env_error_policy::reset_env, 2, 2);
  ASSERT_FALSE(v.reset());
  auto err = v.step(std::vector<std::int64_t>{0, 0});
  EXPECT_TRUE(dice::is(err, errc::env_failed));
  EXPECT_TRUE(v.stopped());
  EXPECT_EQ(v.errors(), 2u);
  // reset() makes it usable again (reset call 4 succeeds).
  EXPECT_FALSE(v.reset());
  EXPECT_FALSE(v.step(std::vector<std::int64_t>{0, 0}));
}

TEST(VectorEnvErrors, VectorResetThrowing) {
  auto keep = failing_reset(env_error_policy::reset_env, 1, 1);
  EXPECT_FALSE(keep.reset()); // retried
  EXPECT_EQ(keep.errors(), 1u);
  EXPECT_EQ(row(keep.obs(), 0), (obs2{1, 0}));
  auto stop = failing_reset(env_error_policy::stop, 1, 1);
  auto err = stop.reset();
  EXPECT_EQ(dice::render(err),
            "env_failed: env 0 (scripted): reset threw "
            "\"reset boom\" (vector step 0)");
  EXPECT_TRUE(stop.stopped());
  EXPECT_EQ(row(stop.obs(), 1), (obs2{1, 0})); // env 1 was reset
  EXPECT_TRUE(
    dice::is(stop.step(std::vector<std::int64_t>{0, 0}), errc::env_failed));
  EXPECT_FALSE(stop.reset()); // the second call succeeds
  EXPECT_FALSE(stop.step(std::vector<std::int64_t>{0, 0}));
}

TEST(VectorEnvErrors, NonStandardExceptionsAreCaughtToo) {
  struct odd_env : scripted_env {
    dice::step_result step(const dice::action_view&, float*) override {
      throw 42;
    }
  };
  auto v = vector_env::make(1, [](std::size_t) {
    return std::make_unique<odd_env>();
  });
  ASSERT_TRUE(v);
  ASSERT_FALSE(v->reset());
  EXPECT_FALSE(v->step(std::vector<std::int64_t>{0}));
  EXPECT_EQ(v->errors(), 1u);
  EXPECT_NE(dice::render(v->last_error()).find("not derived from"),
            std::string::npos);
}

} // namespace
