// The replay buffer: the uniform ring (as the examples had it, any
// obs_dim) and proportional prioritized replay (sampling frequencies,
// importance weights, priority updates, overwriting), and saving and
// loading both.

#include "dice/core/errc.hpp"
#include "dice/rl/replay_buffer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <vector>

using namespace dice::rl;

namespace {

// `n` transitions whose every float is the transition's number, starting at
// `first`, and whose action is that number mod 2.
transition_batch numbered(int n, std::int64_t dim = 4, int first = 0) {
  transition_batch xs;
  xs.obs_dim = dim;
  for (int i = first; i < first + n; ++i) {
    auto v = static_cast<float>(i);
    xs.obs.insert(xs.obs.end(), static_cast<std::size_t>(dim), v);
    xs.next_obs.insert(xs.next_obs.end(), static_cast<std::size_t>(dim), -v);
    xs.action.push_back(i % 2);
    xs.reward.push_back(v);
    xs.discount.push_back(0.5f);
  }
  return xs;
}

replay_options per(std::size_t capacity, double alpha, double eps) {
  replay_options opts;
  opts.capacity = capacity;
  opts.prioritized = true;
  opts.alpha = alpha;
  opts.priority_eps = eps;
  return opts;
}

// How often each slot is drawn in `rounds` samples of `batch`.
std::map<std::int64_t, std::int64_t> counts(replay_buffer& buf, int rounds,
                                            std::int64_t batch) {
  std::map<std::int64_t, std::int64_t> n;
  for (int r = 0; r < rounds; ++r)
    for (auto i : buf.sample(batch).indices)
      ++n[i];
  return n;
}

TEST(ReplayBuffer, KeepsTheNewestAndSamplesWhatItHolds) {
  replay_options opts;
  opts.capacity = 3;
  replay_buffer buf{4, opts, 1};
  ASSERT_FALSE(buf.add(numbered(5)));
  EXPECT_EQ(buf.size(), 3u);
  auto s = buf.sample(64);
  EXPECT_EQ(s.obs.sizes(), (std::vector<std::int64_t>{64, 4}));
  auto r = s.reward;
  EXPECT_GE(r.min().item<float>(), 2.0f); // 0 and 1 were overwritten
  EXPECT_TRUE(torch::equal(s.obs.select(1, 0), r));
  EXPECT_TRUE(torch::equal(s.next_obs.select(1, 3), -r));
  EXPECT_TRUE(torch::equal(s.action, r.to(torch::kLong) % 2));
  EXPECT_TRUE(torch::equal(s.weights, torch::ones({64})));
  ASSERT_EQ(s.indices.size(), 64u);
  // Slot of transition i after wrapping: 3 -> 0, 4 -> 1, 2 -> 2.
  for (std::size_t k = 0; k < 64; ++k)
    EXPECT_EQ(s.indices[k], static_cast<std::int64_t>(r[k].item<float>()) % 3);
}

TEST(ReplayBuffer, ElevenFloatsPerObservation) {
  replay_options opts;
  opts.capacity = 10;
  replay_buffer buf{11, opts, 2};
  ASSERT_FALSE(buf.add(numbered(6, 11)));
  auto s = buf.sample(32);
  EXPECT_EQ(s.obs.sizes(), (std::vector<std::int64_t>{32, 11}));
  EXPECT_EQ(s.next_obs.sizes(), (std::vector<std::int64_t>{32, 11}));
  // Every row is the transition its reward names, all 11 floats of it.
  auto want = s.reward.unsqueeze(1).expand({32, 11});
  EXPECT_TRUE(torch::equal(s.obs, want));
  EXPECT_TRUE(torch::equal(s.next_obs, -want));
}

TEST(ReplayBuffer, UniformDrawsAreTheExamplesDraws) {
  // The examples drew uniform_int_distribution<size_t>{0, size - 1} from a
  // mt19937_64 seeded with the buffer's seed: a seeded run must sample the
  // same slots.
  replay_options opts;
  opts.capacity = 100;
  replay_buffer buf{4, opts, 42};
  ASSERT_FALSE(buf.add(numbered(37)));
  auto s = buf.sample(50);
  std::mt19937_64 rng{42};
  std::uniform_int_distribution<std::size_t> pick{0, 36};
  for (std::size_t k = 0; k < 50; ++k)
    EXPECT_EQ(s.indices[k], static_cast<std::int64_t>(pick(rng))) << k;
}

TEST(ReplayBuffer, RefusesWhatDoesNotFit) {
  replay_options opts;
  opts.capacity = 4;
  replay_buffer buf{4, opts, 1};
  EXPECT_TRUE(dice::is(buf.add(numbered(2, 5)), dice::errc::malformed_input));
  auto bad = numbered(2);
  bad.reward[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(dice::is(buf.add(bad), dice::errc::malformed_input));
  EXPECT_EQ(buf.size(), 0u); // refused whole, not the first row
  // An empty buffer samples an empty batch, not garbage.
  auto s = buf.sample(8);
  EXPECT_EQ(s.obs.size(0), 0);
  EXPECT_TRUE(s.indices.empty());
  opts.capacity = 0;
  EXPECT_TRUE(dice::is(validate(opts), dice::errc::invalid_config));
  replay_buffer none{4, opts, 1};
  EXPECT_TRUE(dice::is(none.add(numbered(1)), dice::errc::invalid_config));
}

TEST(ReplayOptions, ValidateNamesBadValues) {
  EXPECT_FALSE(validate(replay_options{}));
  auto bad = [](auto change) {
    replay_options x;
    change(x);
    return dice::is(validate(x), dice::errc::invalid_config);
  };
  EXPECT_TRUE(bad([](auto& x) {
    x.alpha = -1;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.beta = 1.5;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.beta_end = -0.1;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.beta_steps = -1;
  }));
  EXPECT_TRUE(bad([](auto& x) {
    x.priority_eps = 0;
  }));
}

TEST(PrioritizedReplay, SamplingFrequenciesFollowThePriorities) {
  // alpha 1, eps 1, |td| = 0, 1, 2, 5: p = 1, 2, 3, 6 of 12.
  replay_buffer buf{4, per(4, 1.0, 1.0), 7};
  ASSERT_FALSE(buf.add(numbered(4)));
  ASSERT_FALSE(buf.update_priorities({0, 1, 2, 3}, {0, 1, -2, 5}));
  EXPECT_DOUBLE_EQ(buf.total_priority(), 12.0);
  constexpr int rounds = 1000;
  constexpr std::int64_t batch = 64;
  auto n = counts(buf, rounds, batch);
  double draws = rounds * batch; // 64000
  std::vector<double> p{1.0 / 12, 2.0 / 12, 3.0 / 12, 6.0 / 12};
  for (std::int64_t i = 0; i < 4; ++i) {
    // Binomial std sqrt(N p (1 - p)): 69.9 for p = 1/12, 80 for 1/2;
    // stratified draws vary less, so 5 std is ample yet tight.
    auto mean = draws * p[i];
    auto sd = std::sqrt(draws * p[i] * (1 - p[i]));
    EXPECT_NEAR(static_cast<double>(n[i]), mean, 5 * sd) << "slot " << i;
  }
}

TEST(PrioritizedReplay, HandComputedImportanceWeights) {
  // alpha 0.5, beta 0.5, eps 1, |td| = 3, 0, 8, 15:
  // p = 4, 1, 9, 16; p^alpha = 2, 1, 3, 4 (total 10); P = .2, .1, .3, .4;
  // w = (4 P)^-0.5 = 0.8^-.5, 0.4^-.5, 1.2^-.5, 1.6^-.5; the largest is
  // slot 1's (smallest P), so w / max = (P / 0.1)^-0.5 = 1/sqrt(2), 1,
  // 1/sqrt(3), 1/2.
  auto opts = per(4, 0.5, 1.0);
  opts.beta = 0.5;
  replay_buffer buf{4, opts, 3};
  ASSERT_FALSE(buf.add(numbered(4)));
  ASSERT_FALSE(buf.update_priorities({0, 1, 2, 3}, {3, 0, -8, 15}));
  std::vector<double> want_p{2, 1, 3, 4};
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(buf.priority(i), want_p[i]);
  EXPECT_DOUBLE_EQ(buf.max_priority(), 16.0);
  std::vector<float> want_w{1 / std::sqrt(2.0f), 1, 1 / std::sqrt(3.0f), 0.5f};
  auto s = buf.sample(256);
  std::vector<int> seen(4, 0);
  for (std::size_t k = 0; k < s.indices.size(); ++k) {
    auto i = static_cast<std::size_t>(s.indices[k]);
    ++seen[i];
    EXPECT_NEAR(s.weights[static_cast<std::int64_t>(k)].item<float>(),
                want_w[i], 1e-6)
      << "slot " << i;
    EXPECT_EQ(s.reward[static_cast<std::int64_t>(k)].item<float>(),
              static_cast<float>(i));
  }
  for (auto x : seen)
    EXPECT_GT(x, 0);
}

TEST(PrioritizedReplay, UpdatePrioritiesChangesWhatIsDrawn) {
  replay_buffer buf{4, per(8, 1.0, 1e-6), 11};
  ASSERT_FALSE(buf.add(numbered(8)));
  // New transitions all start at the max priority (1): uniform for now.
  auto before = counts(buf, 100, 80);
  for (std::int64_t i = 0; i < 8; ++i)
    EXPECT_NEAR(before[i], 1000, 5 * std::sqrt(8000 * 0.125 * 0.875));
  // Slot 5 gets |td| 1000, the others 0: (1000 + 1e-6) / (1000 + 8e-6)
  // of the mass; the rest together ~8e-9, never drawn in 8000.
  ASSERT_FALSE(buf.update_priorities({0, 1, 2, 3, 4, 5, 6, 7},
                                     {0, 0, 0, 0, 0, 1000, 0, 0}));
  auto after = counts(buf, 100, 80);
  EXPECT_EQ(after[5], 8000);
  // And back: slot 2 takes over.
  ASSERT_FALSE(buf.update_priorities({5, 2}, {0, 3000}));
  auto again = counts(buf, 10, 80);
  EXPECT_EQ(again[2], 800);
}

TEST(PrioritizedReplay, BadUpdatesChangeNothing) {
  replay_buffer buf{4, per(4, 1.0, 1.0), 1};
  ASSERT_FALSE(buf.add(numbered(3)));
  auto nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(dice::is(buf.update_priorities({0, 3}, {1, 1}),
                       dice::errc::invalid_config)); // slot 3 is empty
  EXPECT_TRUE(dice::is(buf.update_priorities({0, -1}, {1, 1}),
                       dice::errc::invalid_config));
  EXPECT_TRUE(dice::is(buf.update_priorities({0, 1}, {1, nan}),
                       dice::errc::invalid_config));
  EXPECT_TRUE(
    dice::is(buf.update_priorities({0, 1}, {1}), dice::errc::invalid_config));
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_DOUBLE_EQ(buf.priority(i), 1.0) << i; // slot 0 kept its 1 too
  EXPECT_DOUBLE_EQ(buf.max_priority(), 1.0);
}

TEST(PrioritizedReplay, AFullRingOverwritesTheOldestAndItsPriority) {
  // alpha 1, eps 1: slot 0 (transition 0) gets |td| 0 -> p 1, slot 1 gets
  // |td| 9 -> p 10 (the max), slot 2 |td| 1 -> p 2.
  replay_buffer buf{4, per(3, 1.0, 1.0), 5};
  ASSERT_FALSE(buf.add(numbered(3)));
  ASSERT_FALSE(buf.update_priorities({0, 1, 2}, {0, 9, 1}));
  EXPECT_DOUBLE_EQ(buf.priority(0), 1.0);
  // Transition 3 replaces transition 0 in slot 0, with the max priority
  // 10, not slot 0's old 1.
  ASSERT_FALSE(buf.add(numbered(1, 4, 3)));
  EXPECT_EQ(buf.size(), 3u);
  EXPECT_DOUBLE_EQ(buf.priority(0), 10.0);
  EXPECT_DOUBLE_EQ(buf.total_priority(), 22.0);
  auto s = buf.sample(500);
  EXPECT_GE(s.reward.min().item<float>(), 1.0f); // transition 0 is gone
  // The smallest priority is now slot 2's 2: w = (p / 2)^-beta.
  auto beta = buf.beta();
  for (std::size_t k = 0; k < s.indices.size(); ++k) {
    auto p = buf.priority(static_cast<std::size_t>(s.indices[k]));
    EXPECT_NEAR(s.weights[static_cast<std::int64_t>(k)].item<float>(),
                std::pow(p / 2.0, -beta), 1e-6);
  }
}

TEST(PrioritizedReplay, BetaFollowsItsSchedule) {
  auto opts = per(4, 0.6, 1e-6);
  opts.beta = 0.4;
  opts.beta_end = 1.0;
  opts.beta_steps = 4;
  replay_buffer buf{4, opts, 1};
  ASSERT_FALSE(buf.add(numbered(4)));
  EXPECT_DOUBLE_EQ(buf.beta(), 0.4);
  buf.sample(2);
  buf.sample(2);
  EXPECT_DOUBLE_EQ(buf.beta(), 0.7); // 0.4 + 2/4 * 0.6
  for (int i = 0; i < 5; ++i)
    buf.sample(2);
  EXPECT_DOUBLE_EQ(buf.beta(), 1.0); // stays at the end
  // Without a schedule the caller sets it.
  replay_buffer manual{4, per(4, 0.6, 1e-6), 1};
  manual.set_beta(0.9);
  EXPECT_DOUBLE_EQ(manual.beta(), 0.9);
}

// Saves `buf` into an archive in memory and loads it into `into`.
caf::error round_trip(const replay_buffer& buf, replay_buffer& into) {
  torch::serialize::OutputArchive out;
  buf.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  return into.load(in);
}

TEST(ReplayState, UniformRoundTrip) {
  replay_options opts;
  opts.capacity = 5;
  replay_buffer a{11, opts, 1};
  ASSERT_FALSE(a.add(numbered(7, 11)));
  replay_buffer b{11, opts, 9};
  ASSERT_FALSE(round_trip(a, b));
  EXPECT_EQ(b.size(), 5u);
  // Same contents and ring position: the next add overwrites the same slot.
  ASSERT_FALSE(a.add(numbered(1, 11, 100)));
  ASSERT_FALSE(b.add(numbered(1, 11, 100)));
  auto sa = a.sample(200);
  auto sb = b.sample(200);
  std::map<std::int64_t, float> ra, rb;
  for (std::size_t k = 0; k < 200; ++k) {
    ra[sa.indices[k]] = sa.reward[static_cast<std::int64_t>(k)].item<float>();
    rb[sb.indices[k]] = sb.reward[static_cast<std::int64_t>(k)].item<float>();
  }
  // Slots 0..4 held 5, 6, 2, 3, 4; 100 then replaced slot 2.
  std::map<std::int64_t, float> want{{0, 5}, {1, 6}, {2, 100}, {3, 3}, {4, 4}};
  EXPECT_EQ(ra, want);
  EXPECT_EQ(rb, want);
}

TEST(ReplayState, PrioritizedRoundTrip) {
  auto opts = per(6, 0.7, 0.01);
  opts.beta_steps = 10;
  replay_buffer a{4, opts, 1};
  ASSERT_FALSE(a.add(numbered(5)));
  ASSERT_FALSE(a.update_priorities({0, 1, 2, 3, 4}, {0.5f, 3, 0, 7, 1}));
  a.sample(4);
  a.sample(4);
  replay_buffer b{4, opts, 2};
  ASSERT_FALSE(round_trip(a, b));
  EXPECT_EQ(b.size(), 5u);
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_DOUBLE_EQ(b.priority(i), a.priority(i)) << i;
  EXPECT_DOUBLE_EQ(b.total_priority(), a.total_priority());
  EXPECT_DOUBLE_EQ(b.max_priority(), a.max_priority()); // 7.01
  EXPECT_DOUBLE_EQ(b.beta(), a.beta());                 // 2 of 10 steps
  // The restored tree draws: the heaviest slot (3) most often.
  auto n = counts(b, 50, 64);
  for (std::int64_t i : {0, 1, 2, 4})
    EXPECT_GT(n[3], n[i]) << i;
  // A new transition takes the restored max priority 7.01^0.7.
  ASSERT_FALSE(b.add(numbered(1, 4, 5)));
  EXPECT_NEAR(b.priority(5), std::pow(7.01, 0.7), 1e-12);
}

TEST(ReplayState, UniformFileInAPrioritizedBuffer) {
  replay_options opts;
  opts.capacity = 4;
  replay_buffer a{4, opts, 1};
  ASSERT_FALSE(a.add(numbered(3)));
  opts.prioritized = true;
  replay_buffer b{4, opts, 1};
  ASSERT_FALSE(round_trip(a, b));
  EXPECT_EQ(b.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_DOUBLE_EQ(b.priority(i), 1.0);
  EXPECT_DOUBLE_EQ(b.priority(3), 0.0);
}

// An archive as examples/dqn_cartpole wrote it (no "replay.obs_dim", 4
// floats a slot), capacity 2, holding `size` transitions.
std::stringstream examples_file(std::int64_t size) {
  torch::serialize::OutputArchive out;
  auto i64 = [](std::int64_t x) {
    return torch::tensor(x);
  };
  out.write("replay.capacity", i64(2));
  out.write("replay.size", i64(size));
  out.write("replay.next", i64(1));
  out.write("replay.obs",
            torch::tensor({1.f, 2.f, 3.f, 4.f, 0.f, 0.f, 0.f, 0.f}));
  out.write("replay.next_obs", torch::zeros({8}));
  out.write("replay.reward", torch::tensor({2.5f, 0.f}));
  out.write("replay.discount", torch::tensor({0.9f, 0.f}));
  out.write("replay.action", torch::tensor({1, 0}, torch::kLong));
  std::stringstream bytes;
  out.save_to(bytes);
  return bytes;
}

TEST(ReplayState, ExamplesFilesWithoutObsDimLoad) {
  auto bytes = examples_file(1);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  replay_options opts;
  opts.capacity = 2;
  replay_buffer b{4, opts, 1};
  ASSERT_FALSE(b.load(in));
  ASSERT_EQ(b.size(), 1u);
  auto s = b.sample(1);
  EXPECT_TRUE(torch::equal(s.obs, torch::tensor({{1.f, 2.f, 3.f, 4.f}})));
  EXPECT_EQ(s.action[0].item<std::int64_t>(), 1);
  EXPECT_EQ(s.reward[0].item<float>(), 2.5f);
}

TEST(ReplayState, FilesThatDoNotFitChangeNothing) {
  replay_options opts;
  opts.capacity = 4;
  replay_buffer a{4, opts, 1};
  ASSERT_FALSE(a.add(numbered(2)));
  replay_buffer b{4, opts, 1};
  ASSERT_FALSE(b.add(numbered(3, 4, 10)));
  opts.capacity = 5;
  replay_buffer other_capacity{4, opts, 1};
  EXPECT_TRUE(
    dice::is(round_trip(a, other_capacity), dice::errc::model_mismatch));
  opts.capacity = 4;
  replay_buffer other_dim{5, opts, 1};
  EXPECT_TRUE(dice::is(round_trip(a, other_dim), dice::errc::model_mismatch));
  // A corrupt file: size beyond the capacity.
  opts.capacity = 2;
  replay_buffer c{4, opts, 1};
  ASSERT_FALSE(c.add(numbered(1, 4, 10)));
  auto bytes = examples_file(3);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  EXPECT_TRUE(dice::is(c.load(in), dice::errc::malformed_input));
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.sample(1).reward[0].item<float>(), 10.0f);
  // An archive without the keys.
  torch::serialize::OutputArchive empty;
  std::stringstream none;
  empty.save_to(none);
  torch::serialize::InputArchive in2;
  in2.load_from(none);
  EXPECT_TRUE(dice::is(b.load(in2), dice::errc::malformed_input));
  EXPECT_EQ(b.size(), 3u);
  EXPECT_GE(b.sample(16).reward.min().item<float>(), 10.0f);
}

} // namespace
