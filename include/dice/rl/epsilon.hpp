#pragma once

// Exploration for value-based agents: an epsilon schedule over env steps
// and epsilon-greedy actions over a batch of Q-values, drawn from a
// caller-owned RNG so that a seeded collector acts reproducibly.

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dice::rl {

/// How epsilon falls from `start` to `end`.
enum class decay_kind : std::uint8_t {
  /// start + min(1, t / decay_steps) * (end - start).
  linear,
  /// end + (start - end) * exp(-t / decay_steps).
  exponential,
};

/// Epsilon as a function of the environment steps taken.
struct epsilon_schedule {
  /// Exploration at the start.
  double start = 1.0;
  /// Exploration at the end of the decay.
  double end = 0.05;
  /// Env steps over which epsilon decays (linear: reaches `end`;
  /// exponential: the time constant); 0 or less: always `end`.
  double decay_steps = 10000;
  /// Shape of the decay.
  decay_kind decay = decay_kind::linear;

  /// Epsilon after `env_steps` environment steps.
  double at(double env_steps) const noexcept;
};

/// The argmax action of each row of `q_values` [B, A].
std::vector<std::int64_t> greedy(const torch::Tensor& q_values);

/// For each row of `q_values` [B, A], in order: one uniform draw u in
/// [0, 1); if u < `epsilon` a uniformly random action replaces the argmax
/// (two actions: a fair std::bernoulli_distribution coin, the examples'
/// draws; more: std::uniform_int_distribution). Writes B actions to `out`.
void epsilon_greedy(const torch::Tensor& q_values, double epsilon,
                    std::mt19937_64& rng, std::int64_t* out);

/// epsilon_greedy into a new vector.
std::vector<std::int64_t> epsilon_greedy(const torch::Tensor& q_values,
                                         double epsilon, std::mt19937_64& rng);

} // namespace dice::rl
