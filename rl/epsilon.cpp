#include "dice/rl/epsilon.hpp"

#include <algorithm>
#include <cmath>

namespace dice::rl {

double epsilon_schedule::at(double env_steps) const noexcept {
  if (decay_steps <= 0)
    return end;
  if (decay == decay_kind::exponential)
    return end + (start - end) * std::exp(-env_steps / decay_steps);
  auto frac = std::min(1.0, env_steps / decay_steps);
  return start + frac * (end - start);
}

namespace {

// Row-wise argmax as a contiguous int64 tensor [B].
torch::Tensor q_argmax_rows(const torch::Tensor& q_values) {
  torch::NoGradGuard no_grad;
  return q_values.argmax(1).to(torch::kCPU).contiguous();
}

} // namespace

std::vector<std::int64_t> greedy(const torch::Tensor& q_values) {
  auto a = q_argmax_rows(q_values);
  auto* p = a.data_ptr<std::int64_t>();
  return {p, p + a.numel()};
}

void epsilon_greedy(const torch::Tensor& q_values, double epsilon,
                    std::mt19937_64& rng, std::int64_t* out) {
  auto a = q_argmax_rows(q_values);
  auto* p = a.data_ptr<std::int64_t>();
  auto n = a.numel();
  auto actions = q_values.size(1);
  std::uniform_real_distribution<double> u{0.0, 1.0};
  std::bernoulli_distribution coin{0.5};
  std::uniform_int_distribution<std::int64_t> pick{0, actions - 1};
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = p[i];
    if (u(rng) < epsilon)
      out[i] = actions == 2 ? (coin(rng) ? 1 : 0) : pick(rng);
  }
}

std::vector<std::int64_t> epsilon_greedy(const torch::Tensor& q_values,
                                         double epsilon, std::mt19937_64& rng) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(q_values.size(0)));
  epsilon_greedy(q_values, epsilon, rng, out.data());
  return out;
}

} // namespace dice::rl
