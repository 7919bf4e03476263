#include "dice/rl/distributions.hpp"

#include <cmath>

namespace dice::rl {

namespace {

// log(2 pi) / 2, the constant of a standard normal's log density.
constexpr double half_log_two_pi = 0.91893853320467274178;

} // namespace

// -- categorical --------------------------------------------------------------

categorical::categorical(const torch::Tensor& logits)
  : log_probs_(torch::log_softmax(logits, 1)) {
  // nop
}

torch::Tensor categorical::log_prob(const torch::Tensor& actions) const {
  return log_probs_.gather(1, actions.to(torch::kLong).unsqueeze(1)).squeeze(1);
}

torch::Tensor categorical::entropy() const {
  return -(torch::exp(log_probs_) * log_probs_).sum(1);
}

torch::Tensor categorical::mode() const {
  return log_probs_.argmax(1);
}

torch::Tensor categorical::sample(std::mt19937_64& gen) const {
  torch::NoGradGuard no_grad;
  auto lp = log_probs_.to(torch::kCPU, torch::kFloat).contiguous();
  auto rows = lp.size(0);
  auto n = lp.size(1);
  auto out = torch::empty({rows}, torch::kLong);
  auto* p = lp.data_ptr<float>();
  auto* a = out.data_ptr<std::int64_t>();
  // The draw and the float running sum are today's collector's
  // (examples/ppo_cartpole), so seeded CartPole runs act as before.
  std::uniform_real_distribution<float> u{0.0f, 1.0f};
  for (std::int64_t i = 0; i < rows; ++i) {
    float draw = u(gen);
    float cum = 0;
    a[i] = n - 1;
    for (std::int64_t k = 0; k + 1 < n; ++k) {
      cum += std::exp(p[i * n + k]);
      if (draw < cum) {
        a[i] = k;
        break;
      }
    }
  }
  return out;
}

// -- diag_gaussian ------------------------------------------------------------

diag_gaussian::diag_gaussian(const torch::Tensor& mean,
                             const torch::Tensor& log_std)
  : mean_(mean), log_std_(log_std) {
  // nop
}

torch::Tensor diag_gaussian::log_prob(const torch::Tensor& actions) const {
  auto z = (actions - mean_) * torch::exp(-log_std_);
  return (-0.5 * z.pow(2) - log_std_ - half_log_two_pi).sum(1);
}

torch::Tensor diag_gaussian::entropy() const {
  // Per dimension 1/2 + log(2 pi)/2 + log sigma, the same for every row.
  auto per_row = (0.5 + half_log_two_pi + log_std_).sum();
  return per_row.expand({mean_.size(0)});
}

torch::Tensor diag_gaussian::sample(std::mt19937_64& gen) const {
  torch::NoGradGuard no_grad;
  auto mu = mean_.to(torch::kCPU, torch::kFloat).contiguous();
  auto sd = torch::exp(log_std_).to(torch::kCPU, torch::kFloat).contiguous();
  auto rows = mu.size(0);
  auto dims = mu.size(1);
  auto out = torch::empty({rows, dims});
  auto* m = mu.data_ptr<float>();
  auto* s = sd.data_ptr<float>();
  auto* x = out.data_ptr<float>();
  std::normal_distribution<float> z{0.0f, 1.0f};
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t d = 0; d < dims; ++d)
      x[i * dims + d] = m[i * dims + d] + s[d] * z(gen);
  return out;
}

} // namespace dice::rl
