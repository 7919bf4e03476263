#include "dice/env/vector_env.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <string>
#include <utility>

namespace dice {

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t env_seed(std::uint64_t seed, std::size_t index) noexcept {
  return splitmix64(seed * 1000003 + index);
}

namespace {

// A space a batch can be built on: a positive size and ordered bounds.
std::string malformed(const space& s) {
  if (s.is_discrete())
    return s.n > 0 ? std::string{} : "a Discrete space needs n > 0";
  for (auto d : s.shape)
    if (d <= 0)
      return "a Box needs positive dimensions";
  auto size = static_cast<std::size_t>(s.flat_size());
  if (s.low.size() != size || s.high.size() != size)
    return "a Box needs one bound of each kind per value";
  for (std::size_t k = 0; k < size; ++k)
    if (!(s.low[k] <= s.high[k]))
      return "a Box needs low <= high";
  return {};
}

std::string exception_text(std::exception_ptr ep) {
  try {
    std::rethrow_exception(std::move(ep));
  } catch (const std::exception& e) {
    return std::string{"\""} + e.what() + "\"";
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

std::string float_text(float x) {
  if (std::isnan(x))
    return "nan";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, res.ptr);
}

} // namespace

caf::expected<vector_env> vector_env::make(std::size_t n,
                                           const factory& make_env,
                                           vector_env_options opts) {
  if (n == 0)
    return make_error(errc::invalid_config,
                      "vector_env: needs at least one env");
  if (!make_env)
    return make_error(errc::invalid_config, "vector_env: no factory");
  std::vector<std::unique_ptr<env>> envs;
  std::vector<std::string> names;
  std::vector<std::int64_t> limits;
  envs.reserve(n);
  names.reserve(n);
  limits.reserve(n);
  space obs_space;
  space act_space;
  for (std::size_t i = 0; i < n; ++i) {
    std::string name;
    space obs;
    space act;
    try {
      auto e = make_env(i);
      if (!e)
        return make_error(errc::invalid_config,
                          "vector_env: the factory returned no env "
                            + std::to_string(i));
      // Asked once: a step must not call out for them, nor fail on them.
      name = e->name();
      obs = e->observation_space();
      act = e->action_space();
      limits.push_back(e->max_episode_steps());
      names.push_back(name);
      envs.push_back(std::move(e));
    } catch (...) {
      return make_error(errc::invalid_config,
                        "vector_env: building env " + std::to_string(i)
                          + " threw "
                          + exception_text(std::current_exception()));
    }
    auto prefix = "vector_env: env " + std::to_string(i) + " (" + name + ")";
    if (i == 0) {
      if (auto why = malformed(obs); !why.empty())
        return make_error(errc::invalid_config,
                          prefix + ": observation space " + obs.to_string()
                            + ": " + why);
      if (auto why = malformed(act); !why.empty())
        return make_error(errc::invalid_config,
                          prefix + ": action space " + act.to_string() + ": "
                            + why);
      obs_space = std::move(obs);
      act_space = std::move(act);
      continue;
    }
    // One batch needs one row layout and one action check for all envs.
    if (obs != obs_space)
      return make_error(errc::invalid_config,
                        prefix + " has observation space " + obs.to_string()
                          + ", env 0 has " + obs_space.to_string());
    if (act != act_space)
      return make_error(errc::invalid_config,
                        prefix + " has action space " + act.to_string()
                          + ", env 0 has " + act_space.to_string());
  }
  return vector_env(std::move(envs), std::move(names), std::move(limits),
                    std::move(obs_space), std::move(act_space), opts);
}

vector_env::vector_env(std::vector<std::unique_ptr<env>> envs,
                       std::vector<std::string> names,
                       std::vector<std::int64_t> time_limits, space obs_space,
                       space act_space, vector_env_options opts)
  : envs_(std::move(envs)), names_(std::move(names)),
    time_limits_(std::move(time_limits)), obs_space_(std::move(obs_space)),
    act_space_(std::move(act_space)), opts_(opts),
    obs_dim_(static_cast<std::size_t>(obs_space_.flat_size())),
    act_dim_(static_cast<std::size_t>(act_space_.flat_size())) {
  auto n = envs_.size();
  obs_.assign(n * obs_dim_, 0.0f);
  final_obs_.assign(n * obs_dim_, 0.0f);
  rewards_.assign(n, 0.0f);
  terminated_.assign(n, 0);
  truncated_.assign(n, 0);
  failed_.assign(n, 0);
  pending_reset_.assign(n, 0);
  episodes_.reserve(n); // at most one episode per env and step
  returns_.assign(n, 0.0);
  lengths_.assign(n, 0);
}

vector_env::vector_env(vector_env&&) noexcept = default;

vector_env& vector_env::operator=(vector_env&&) noexcept = default;

vector_env::~vector_env() = default;

// -- stepping -----------------------------------------------------------------

caf::error vector_env::reset(std::optional<std::uint64_t> seed) {
  was_reset_ = true;
  stopped_ = false;
  episodes_.clear();
  std::fill(rewards_.begin(), rewards_.end(), 0.0f);
  std::fill(terminated_.begin(), terminated_.end(), 0);
  std::fill(truncated_.begin(), truncated_.end(), 0);
  std::fill(failed_.begin(), failed_.end(), 0);
  std::fill(pending_reset_.begin(), pending_reset_.end(), 0);
  std::fill(returns_.begin(), returns_.end(), 0.0);
  std::fill(lengths_.begin(), lengths_.end(), 0);
  caf::error fatal;
  for (std::size_t i = 0; i < envs_.size(); ++i) {
    std::optional<std::uint64_t> s;
    if (seed)
      s = env_seed(*seed, i);
    reset_one(i, s, fatal);
  }
  std::copy(obs_.begin(), obs_.end(), final_obs_.begin());
  return fatal;
}

caf::error vector_env::step(const std::int64_t* actions) {
  if (!act_space_.is_discrete())
    return make_error(errc::invalid_action,
                      "vector_env: integer actions for the action space "
                        + act_space_.to_string() + " (step with floats)");
  if (actions == nullptr)
    return make_error(errc::invalid_action, "vector_env: no actions");
  return step_impl(actions, nullptr);
}

caf::error vector_env::step(const float* actions) {
  if (act_space_.is_discrete())
    return make_error(errc::invalid_action,
                      "vector_env: float actions for the action space "
                        + act_space_.to_string() + " (step with integers)");
  if (actions == nullptr)
    return make_error(errc::invalid_action, "vector_env: no actions");
  return step_impl(nullptr, actions);
}

caf::error vector_env::step(const std::vector<std::int64_t>& actions) {
  if (actions.size() != envs_.size())
    return make_error(errc::invalid_action,
                      "vector_env: " + std::to_string(actions.size())
                        + " actions for " + std::to_string(envs_.size())
                        + " envs");
  return step(actions.data());
}

caf::error vector_env::step(const std::vector<float>& actions) {
  if (actions.size() != envs_.size() * act_dim_)
    return make_error(errc::invalid_action,
                      "vector_env: " + std::to_string(actions.size())
                        + " action values for " + std::to_string(envs_.size())
                        + " envs of " + std::to_string(act_dim_));
  return step(actions.data());
}

caf::error vector_env::step_impl(const std::int64_t* discrete,
                                 const float* box) {
  if (!was_reset_)
    return make_error(errc::env_failed, "vector_env: step() before reset()");
  if (stopped_)
    return make_error(errc::env_failed,
                      "vector_env: stopped after " + render(last_error_)
                        + "; reset() to go on");
  ++step_count_;
  episodes_.clear();
  caf::error fatal;
  for (std::size_t i = 0; i < envs_.size(); ++i)
    step_one(i, discrete, box, fatal);
  return fatal;
}

void vector_env::step_one(std::size_t i, const std::int64_t* discrete,
                          const float* box, caf::error& fatal) {
  failed_[i] = 0;
  if (pending_reset_[i]) {
    // next_step: this call starts the episode the last one finished; the
    // action is ignored, as in gymnasium.
    pending_reset_[i] = 0;
    rewards_[i] = 0;
    terminated_[i] = 0;
    truncated_[i] = 0;
    reset_one(i, std::nullopt, fatal);
    std::copy_n(obs_row(i), obs_dim_, final_row(i));
    return;
  }
  action_view a;
  if (discrete != nullptr) {
    a.index = discrete[i];
  } else {
    a.values = box + i * act_dim_;
    a.size = act_dim_;
  }
  if (!action_ok(a)) {
    fail(i, make_error(errc::invalid_action, describe_bad_action(i, a)), fatal);
    return;
  }
  step_result r;
  try {
    // Into the final row: it must survive a same-step reset of the obs row.
    r = envs_[i]->step(a, final_row(i));
  } catch (...) {
    fail(i,
         make_error(errc::env_failed,
                    where(i) + ": step threw "
                      + exception_text(std::current_exception()) + at_step(i)),
         fatal);
    return;
  }
  ++lengths_[i];
  ++total_steps_;
  returns_[i] += r.reward;
  rewards_[i] = r.reward;
  terminated_[i] = r.terminated ? 1 : 0;
  // TimeLimit truncates whether or not the step also terminated.
  bool truncated = r.truncated
    || (time_limits_[i] > 0 && lengths_[i] >= time_limits_[i]);
  truncated_[i] = truncated ? 1 : 0;
  if (!r.terminated && !truncated) {
    std::copy_n(final_row(i), obs_dim_, obs_row(i));
    return;
  }
  finish_episode(i, r.terminated, false);
  if (opts_.mode == autoreset::same_step) {
    reset_one(i, std::nullopt, fatal);
  } else {
    std::copy_n(final_row(i), obs_dim_, obs_row(i));
    pending_reset_[i] = 1;
  }
}

bool vector_env::action_ok(const action_view& a) const noexcept {
  if (act_space_.is_discrete())
    return a.index >= 0 && a.index < act_space_.n;
  for (std::size_t k = 0; k < a.size; ++k) {
    auto x = a.values[k];
    // Written so that NaN fails both comparisons.
    if (!(x >= act_space_.low[k] && x <= act_space_.high[k]))
      return false;
  }
  return true;
}

std::string vector_env::describe_bad_action(std::size_t i,
                                            const action_view& a) const {
  std::string what;
  if (act_space_.is_discrete()) {
    what = "action " + std::to_string(a.index);
  } else {
    std::size_t k = 0;
    while (k < a.size && a.values[k] >= act_space_.low[k]
           && a.values[k] <= act_space_.high[k])
      ++k;
    what = "action[" + std::to_string(k) + "] = " + float_text(a.values[k]);
  }
  return where(i) + ": " + what + " outside " + act_space_.to_string()
    + at_step(i);
}

bool vector_env::reset_one(std::size_t i, std::optional<std::uint64_t> seed,
                           caf::error& fatal) {
  // One retry under reset_env: a reset that fails once (a flaky resource)
  // should not end the run, one that fails twice likely always will.
  int attempts = opts_.on_error == env_error_policy::reset_env ? 2 : 1;
  caf::error err;
  for (int k = 0; k < attempts; ++k) {
    try {
      envs_[i]->reset(seed, obs_row(i));
      returns_[i] = 0;
      lengths_[i] = 0;
      return true;
    } catch (...) {
      err = make_error(
        errc::env_failed,
        where(i) + ": reset threw " + exception_text(std::current_exception())
          + " (vector step " + std::to_string(step_count_) + ")");
      ++errors_;
      last_error_ = err;
      failed_[i] = 1;
    }
  }
  // What a half-done reset left in the row means nothing; the final row
  // keeps the finished episode's last observation.
  std::fill_n(obs_row(i), obs_dim_, 0.0f);
  stopped_ = true;
  if (!fatal)
    fatal = std::move(err);
  return false;
}

void vector_env::fail(std::size_t i, caf::error err, caf::error& fatal) {
  ++errors_;
  last_error_ = err;
  rewards_[i] = 0;
  terminated_[i] = 0;
  truncated_[i] = 1;
  failed_[i] = 1;
  // The obs row still holds the observation the action was chosen on; the
  // final row may hold half of what the failed step wrote.
  std::copy_n(obs_row(i), obs_dim_, final_row(i));
  finish_episode(i, false, true);
  if (opts_.on_error == env_error_policy::stop) {
    stopped_ = true;
    if (!fatal)
      fatal = std::move(err);
    return;
  }
  if (opts_.mode == autoreset::same_step)
    reset_one(i, std::nullopt, fatal);
  else
    pending_reset_[i] = 1;
}

void vector_env::finish_episode(std::size_t i, bool terminated, bool failed) {
  episodes_.push_back({i, returns_[i], lengths_[i], terminated, failed});
  ++total_episodes_;
  returns_[i] = 0;
  lengths_[i] = 0;
}

std::string vector_env::where(std::size_t i) const {
  return "env " + std::to_string(i) + " (" + names_[i] + ")";
}

std::string vector_env::at_step(std::size_t i) const {
  return " at step " + std::to_string(lengths_[i] + 1) + " of its episode"
    + " (vector step " + std::to_string(step_count_) + ")";
}

} // namespace dice
