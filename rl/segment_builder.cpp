#include "dice/rl/segment_builder.hpp"

#include "dice/core/errc.hpp"

namespace dice::rl {

caf::expected<segment_builder>
segment_builder::make(std::size_t envs, const step_layout& layout) {
  if (envs == 0)
    return make_error(errc::invalid_config, "segment_builder: no envs");
  // A layout is usable if empty columns of it check out.
  step_columns probe;
  probe.layout = layout;
  auto why = check(probe);
  if (!why.empty())
    return make_error(errc::invalid_config, "segment_builder: " + why);
  return segment_builder{envs, layout};
}

segment_builder::segment_builder(std::size_t envs, const step_layout& layout)
  : envs_(envs), layout_(layout), returns_(envs, 0.0), lengths_(envs, 0) {
  rows_.layout = layout;
}

caf::error segment_builder::add(const step_arrays& s) {
  auto actions_ok = layout_.discrete() ? s.discrete_actions != nullptr
                                       : s.box_actions != nullptr;
  if (s.obs == nullptr || !actions_ok || s.logp == nullptr
      || s.reward == nullptr || s.next_obs == nullptr || s.terminated == nullptr
      || s.truncated == nullptr)
    return make_error(errc::invalid_config,
                      "segment_builder::add: an array for " + to_string(layout_)
                        + " is missing");
  auto n = envs_;
  auto od = static_cast<std::size_t>(layout_.obs_dim);
  auto& r = rows_;
  r.obs.insert(r.obs.end(), s.obs, s.obs + n * od);
  r.next_obs.insert(r.next_obs.end(), s.next_obs, s.next_obs + n * od);
  r.reward.insert(r.reward.end(), s.reward, s.reward + n);
  r.logp.insert(r.logp.end(), s.logp, s.logp + n);
  if (s.value != nullptr) {
    r.value.insert(r.value.end(), s.value, s.value + n);
    r.has_value.insert(r.has_value.end(), n, 1);
  } else {
    r.value.insert(r.value.end(), n, 0.0f);
    r.has_value.insert(r.has_value.end(), n, 0);
  }
  if (layout_.discrete()) {
    r.discrete_actions.insert(r.discrete_actions.end(), s.discrete_actions,
                              s.discrete_actions + n);
  } else {
    auto ad = static_cast<std::size_t>(layout_.act_dim);
    r.box_actions.insert(r.box_actions.end(), s.box_actions,
                         s.box_actions + n * ad);
  }
  for (std::size_t i = 0; i < n; ++i) {
    // Flags as 0/1 whatever nonzero byte the env wrote.
    std::uint8_t term = s.terminated[i] != 0 ? 1 : 0;
    std::uint8_t trunc = s.truncated[i] != 0 ? 1 : 0;
    r.terminated.push_back(term);
    r.truncated.push_back(trunc);
    returns_[i] += s.reward[i];
    ++lengths_[i];
    if (term || trunc) {
      episodes_.push_back(episode_record{returns_[i], lengths_[i]});
      returns_[i] = 0;
      lengths_[i] = 0;
    }
  }
  ++steps_;
  return caf::none;
}

collected_segments segment_builder::finish(std::uint32_t origin,
                                           std::int64_t version) {
  collected_segments out;
  auto n = envs_;
  auto t_max = static_cast<std::size_t>(steps_);
  if (t_max > 0) {
    // Env by env: env i's T steps are rows i, n + i, 2n + i, ... of rows_.
    step_columns cols;
    cols.layout = layout_;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t t = 0; t < t_max; ++t)
        cols.append(rows_, t * n + i, 1);
    for (std::size_t i = 0; i < n; ++i)
      out.trajectory_end_idx.push_back(
        static_cast<std::int64_t>((i + 1) * t_max) - 1);
    out.env_steps = static_cast<std::int64_t>(n * t_max);
    out.trajectories.push_back(pack_steps(cols, origin, version));
  }
  if (!episodes_.empty()) {
    for (auto& e : episodes_)
      out.finished_returns.push_back(e.ret);
    out.episodes.push_back(dice::pack(episodes_, origin, version));
  }
  rows_ = step_columns{};
  rows_.layout = layout_;
  episodes_.clear();
  steps_ = 0;
  return out;
}

} // namespace dice::rl
