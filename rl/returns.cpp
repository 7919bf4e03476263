#include "dice/rl/returns.hpp"

#include "dice/core/errc.hpp"

#include <algorithm>
#include <cmath>

namespace dice::rl {

namespace {

caf::error check_sizes(const return_inputs& in) {
  auto n = in.value.size();
  if (in.next_value.size() != n || in.reward.size() != n
      || in.terminated.size() != n || in.traj_flag.size() != n)
    return make_error(errc::invalid_config,
                      "return_inputs of different lengths");
  return caf::none;
}

} // namespace

caf::expected<std::vector<float>> gae(const return_inputs& in, float gamma,
                                      float lambda) {
  if (auto err = check_sizes(in))
    return err;
  auto n = in.value.size();
  std::vector<float> adv(n);
  float next_adv = 0;
  for (auto t = n; t-- > 0;) {
    float not_term = in.terminated[t] ? 0.0f : 1.0f;
    float not_end = in.traj_flag[t] ? 0.0f : 1.0f;
    float delta = in.reward[t] + gamma * not_term * in.next_value[t]
      - in.value[t];
    next_adv = delta + gamma * lambda * not_end * next_adv;
    adv[t] = next_adv;
  }
  return adv;
}

caf::expected<vtrace_result> vtrace(const return_inputs& in,
                                    const std::vector<float>& log_rho,
                                    const vtrace_options& opts) {
  if (auto err = check_sizes(in))
    return err;
  auto n = in.value.size();
  if (log_rho.size() != n)
    return make_error(errc::invalid_config, "log_rho of a different length");
  vtrace_result r;
  r.vs.resize(n);
  r.pg_adv.resize(n);
  // acc = v_{t+1} - V(x_{t+1}) of the step after t in its trajectory.
  float acc = 0;
  for (auto t = n; t-- > 0;) {
    float ratio = std::exp(log_rho[t]);
    float rho = std::min(opts.rho_bar, ratio);
    float c = opts.lambda * std::min(opts.c_bar, ratio);
    float pg_rho = std::min(opts.pg_rho_bar, ratio);
    float disc = in.terminated[t] ? 0.0f : opts.gamma;
    bool last = in.traj_flag[t] != 0;
    if (last)
      acc = 0;
    float delta = rho * (in.reward[t] + disc * in.next_value[t] - in.value[t]);
    // v_{t+1}: the V-trace target of the next step, or the bootstrap value
    // where the trajectory ends.
    float next_vs = last ? in.next_value[t] : in.next_value[t] + acc;
    acc = delta + disc * c * acc;
    r.vs[t] = in.value[t] + acc;
    r.pg_adv[t] = pg_rho * (in.reward[t] + disc * next_vs - in.value[t]);
  }
  return r;
}

} // namespace dice::rl
