// The learner group when a rank fails, ranks as threads of this process: a
// hung rank, a rank that leaves, and the survivors re-forming at L-1. Every
// wait is a collective's own deadline; nothing sleeps.

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"
#include "torch/learner_group_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace {

using dice::test::is_failure;
using dice::test::ms_since;
using dice::test::test_config;

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using dice::errc;
using dice::learner_group;
using dice::learner_group_config;
using dice::test::make_net;
using dice::test::module_bytes;
using dice::test::tiny_net;
using dice::test::train_step;
using dice::test::with_group;

// What the survivors hand each other to re-form: the new rank 0's port.
struct reform_channel {
  std::promise<std::uint16_t> port;
  std::shared_future<std::uint16_t> port_future = port.get_future().share();
};

// Re-forms from `g` with `survivors` (old ranks), brings every survivor to
// the state of the one with the most completed steps, then trains `more`
// steps. Returns the parameter bytes after them ("" on failure).
std::string reform_and_train(learner_group& g, tiny_net& net,
                             torch::optim::Optimizer& opt, int steps_done,
                             std::vector<int> survivors, reform_channel& ch,
                             int more, double* reform_ms) {
  auto t0 = clock_type::now();
  auto next = learner_group::next_generation(g.config(), survivors);
  EXPECT_TRUE(next) << dice::render(next.error());
  if (!next)
    return {};
  caf::expected<learner_group> ng{caf::error{}};
  if (next->rank == 0) {
    ng = learner_group::create(*next);
    if (!ng) {
      ADD_FAILURE() << dice::render(ng.error());
      ch.port.set_value(0);
      return {};
    }
    ch.port.set_value(ng->store_port());
    if (auto err = ng->join()) {
      ADD_FAILURE() << dice::render(err);
      return {};
    }
  } else {
    if (ch.port_future.wait_for(30s) != std::future_status::ready) {
      ADD_FAILURE() << "no port from the new rank 0";
      return {};
    }
    next->store_port = ch.port_future.get();
    ng = learner_group::form(*next);
    if (!ng) {
      ADD_FAILURE() << dice::render(ng.error());
      return {};
    }
  }
  EXPECT_EQ(ng->generation(), g.generation() + 1);
  // A survivor may have applied the failed step where another did not:
  // the one with the most steps (lowest rank on a tie) is the source.
  auto done = ng->all_gather(steps_done);
  EXPECT_TRUE(done) << dice::render(done.error());
  if (!done)
    return {};
  auto root = static_cast<int>(std::max_element(done->begin(), done->end())
                               - done->begin());
  EXPECT_FALSE(ng->broadcast_parameters(*net, root));
  EXPECT_FALSE(ng->broadcast_optimizer(opt, root));
  if (reform_ms)
    *reform_ms = ms_since(t0);
  for (int s = 0; s < more; ++s) {
    auto err = train_step(*ng, net, opt, ng->rank(), 100 + s);
    EXPECT_FALSE(err) << dice::render(err);
    if (err)
      return {};
  }
  EXPECT_FALSE(ng->verify_identical(*net));
  return module_bytes(*net);
}

// Counts down from n; waiters return at zero (or at their deadline).
struct countdown {
  explicit countdown(int n) : left(n) {}
  void arrive() {
    std::lock_guard<std::mutex> guard{mtx};
    if (--left == 0)
      cv.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, timeout, [&] {
      return left <= 0;
    });
  }
  std::mutex mtx;
  std::condition_variable cv;
  int left;
};

TEST(LearnerGroupFailure, HungRankEndsTheStepWithinTimeoutThenSurvivorsReform) {
  auto base = test_config(0, 3, 0);
  base.timeout = 1000ms;
  countdown failed{2};
  reform_channel ch;
  std::vector<caf::error> errs(3);
  std::vector<double> fail_ms(3, 0), reform_ms(3, 0);
  std::vector<std::string> after(3);
  with_group(base, [&](int r, learner_group& g) {
    auto net = make_net(10 + r);
    torch::optim::Adam opt{net->parameters(), torch::optim::AdamOptions(1e-2)};
    ASSERT_FALSE(g.broadcast_parameters(*net));
    int done = 0;
    for (int s = 1; s <= 2; ++s, ++done)
      ASSERT_FALSE(train_step(g, net, opt, r, s));
    if (r == 2) {
      // Hung: alive and connected, but never joins step 3.
      EXPECT_TRUE(failed.wait(60s));
      g.abort();
      auto err = g.all_reduce_gradients(*net);
      EXPECT_TRUE(dice::is(err, errc::finished)) << dice::render(err);
      return;
    }
    auto t0 = clock_type::now();
    errs[r] = train_step(g, net, opt, r, 3);
    fail_ms[r] = ms_since(t0);
    failed.arrive();
    EXPECT_FALSE(g.ready());
    // Later calls fail at once with the same error.
    auto again = clock_type::now();
    EXPECT_TRUE(is_failure(g.all_reduce_gradients(*net)));
    EXPECT_LT(ms_since(again), 100.0);
    after[r] = reform_and_train(g, net, opt, done, {0, 1}, ch, 3,
                                &reform_ms[r]);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(is_failure(errs[r])) << dice::render(errs[r]);
    // Bounded: the collective timeout, plus at most one more for the one
    // other bucket in flight (threads = 2), plus scheduling slack.
    EXPECT_LT(fail_ms[r], 2 * 1000.0 + 2000.0) << "rank " << r;
    RecordProperty("fail_ms_rank" + std::to_string(r),
                   std::to_string(fail_ms[r]));
    RecordProperty("error_rank" + std::to_string(r), dice::render(errs[r]));
    RecordProperty("reform_ms_rank" + std::to_string(r),
                   std::to_string(reform_ms[r]));
  }
  // The first survivor to notice saw the timeout itself.
  EXPECT_TRUE(dice::is(errs[0], errc::timeout)
              || dice::is(errs[1], errc::timeout))
    << dice::render(errs[0]) << " / " << dice::render(errs[1]);
  EXPECT_GE(std::max(fail_ms[0], fail_ms[1]), 900.0);
  ASSERT_FALSE(after[0].empty());
  EXPECT_TRUE(after[0] == after[1]);
}

TEST(LearnerGroupFailure, SurvivorsReformWhenRankZeroLeaves) {
  reform_channel ch;
  std::vector<caf::error> errs(3);
  std::vector<double> fail_ms(3, 0), reform_ms(3, 0);
  std::vector<std::string> after(3);
  with_group(test_config(0, 3, 0), [&](int r, learner_group& g) {
    auto net = make_net(10 + r);
    torch::optim::Adam opt{net->parameters(), torch::optim::AdamOptions(1e-2)};
    ASSERT_FALSE(g.broadcast_parameters(*net));
    ASSERT_FALSE(g.broadcast_optimizer(opt));
    int done = 0;
    for (int s = 1; s <= 2; ++s, ++done)
      ASSERT_FALSE(train_step(g, net, opt, r, s));
    if (r == 0) {
      g.abort(); // leaves: its connections close
      return;
    }
    auto t0 = clock_type::now();
    errs[r] = train_step(g, net, opt, r, 3);
    fail_ms[r] = ms_since(t0);
    after[r] = reform_and_train(g, net, opt, done, {1, 2}, ch, 3,
                                &reform_ms[r]);
  });
  for (int r = 1; r < 3; ++r) {
    EXPECT_TRUE(is_failure(errs[r])) << dice::render(errs[r]);
    // Closed connections are seen at once, well within the timeout (10 s).
    EXPECT_LT(fail_ms[r], 5000.0)
      << "rank " << r << " " << dice::render(errs[r]) << " other "
      << dice::render(errs[3 - r]) << " " << fail_ms[3 - r];
    RecordProperty("fail_ms_rank" + std::to_string(r),
                   std::to_string(fail_ms[r]));
    RecordProperty("error_rank" + std::to_string(r), dice::render(errs[r]));
    RecordProperty("reform_ms_rank" + std::to_string(r),
                   std::to_string(reform_ms[r]));
  }
  ASSERT_FALSE(after[1].empty());
  EXPECT_TRUE(after[1] == after[2]);
}

} // namespace
