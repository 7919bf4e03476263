#include "dice/rl/segments.hpp"

#include "dice/core/errc.hpp"
#include "dice/messages/bounded_archive.hpp"

#include <boost/archive/binary_oarchive.hpp>
#include <boost/iostreams/stream.hpp>

#include <cmath>
#include <exception>
#include <limits>

namespace dice::rl {

// -- layout and columns -------------------------------------------------------

namespace {

// Why `x` cannot describe steps ("" if it can).
std::string check_layout(const step_layout& x) {
  if (x.obs_dim < 1)
    return "observation size " + std::to_string(x.obs_dim);
  bool discrete = x.num_actions >= 1 && x.act_dim == 0;
  bool box = x.num_actions == 0 && x.act_dim >= 1;
  if (!discrete && !box)
    return "neither Discrete nor Box actions (n "
      + std::to_string(x.num_actions) + ", act_dim " + std::to_string(x.act_dim)
      + ")";
  return {};
}

// True if `col` holds `rows` rows of `width` values (no overflow: a forged
// width cannot make a short column pass).
template <class T>
bool has_rows(const std::vector<T>& col, std::size_t rows, std::int64_t width) {
  auto w = static_cast<std::size_t>(width);
  return width > 0 && col.size() % w == 0 && col.size() / w == rows;
}

template <class T>
void append_range(std::vector<T>& dst, const std::vector<T>& src,
                  std::size_t first, std::size_t count, std::int64_t width) {
  auto w = static_cast<std::size_t>(width);
  dst.insert(dst.end(), src.begin() + static_cast<std::ptrdiff_t>(first * w),
             src.begin() + static_cast<std::ptrdiff_t>((first + count) * w));
}

bool all_finite(const float* xs, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(xs[i]))
      return false;
  return true;
}

} // namespace

caf::expected<step_layout> step_layout::of(const space& observation_space,
                                           const space& action_space) {
  if (observation_space.is_discrete())
    return make_error(errc::invalid_config,
                      "observation space " + observation_space.to_string()
                        + " is not a Box");
  step_layout x;
  x.obs_dim = observation_space.flat_size();
  if (action_space.is_discrete())
    x.num_actions = action_space.n;
  else
    x.act_dim = action_space.flat_size();
  auto why = check_layout(x);
  if (!why.empty())
    return make_error(errc::invalid_config, "step layout: " + why);
  return x;
}

std::string to_string(const step_layout& x) {
  auto obs = "obs " + std::to_string(x.obs_dim);
  if (x.discrete())
    return obs + ", Discrete(" + std::to_string(x.num_actions) + ")";
  return obs + ", Box(" + std::to_string(x.act_dim) + ")";
}

void step_columns::append(const step_columns& src, std::size_t first,
                          std::size_t count) {
  append_range(reward, src.reward, first, count, 1);
  append_range(logp, src.logp, first, count, 1);
  append_range(value, src.value, first, count, 1);
  append_range(terminated, src.terminated, first, count, 1);
  append_range(truncated, src.truncated, first, count, 1);
  append_range(has_value, src.has_value, first, count, 1);
  if (src.layout.discrete())
    append_range(discrete_actions, src.discrete_actions, first, count, 1);
  else
    append_range(box_actions, src.box_actions, first, count,
                 src.layout.act_dim);
  append_range(obs, src.obs, first, count, src.layout.obs_dim);
  append_range(next_obs, src.next_obs, first, count, src.layout.obs_dim);
}

std::string check(const step_columns& x) {
  auto why = check_layout(x.layout);
  if (!why.empty())
    return why;
  auto n = x.size();
  auto& l = x.layout;
  if (x.logp.size() != n || x.value.size() != n || x.terminated.size() != n
      || x.truncated.size() != n || x.has_value.size() != n)
    return "columns of different lengths";
  if (!has_rows(x.obs, n, l.obs_dim) || !has_rows(x.next_obs, n, l.obs_dim))
    return "observations not " + std::to_string(n) + " x "
      + std::to_string(l.obs_dim);
  if (l.discrete()
        ? x.discrete_actions.size() != n || !x.box_actions.empty()
        : !has_rows(x.box_actions, n, l.act_dim) || !x.discrete_actions.empty())
    return "actions do not match " + to_string(l);
  for (std::size_t i = 0; i < n; ++i) {
    auto at = [i](const std::string& what) {
      return "step " + std::to_string(i) + ": " + what;
    };
    auto o = static_cast<std::ptrdiff_t>(i) * l.obs_dim;
    if (!all_finite(x.obs.data() + o, l.obs_dim)
        || !all_finite(x.next_obs.data() + o, l.obs_dim))
      return at("non-finite observation");
    if (!std::isfinite(x.reward[i]))
      return at("non-finite reward");
    // A probability's log is <= 0 (a Box density's may be larger); -inf
    // would make every importance weight 0 or infinite.
    if (!std::isfinite(x.logp[i]) || (l.discrete() && x.logp[i] > 0))
      return at("log-probability " + std::to_string(x.logp[i])
                + " out of range");
    if (l.discrete()) {
      auto a = x.discrete_actions[i];
      if (a < 0 || a >= l.num_actions)
        return at("action " + std::to_string(a) + " out of range");
    } else if (!all_finite(x.box_actions.data()
                             + static_cast<std::ptrdiff_t>(i) * l.act_dim,
                           l.act_dim)) {
      return at("non-finite action");
    }
    if (x.terminated[i] > 1 || x.truncated[i] > 1 || x.has_value[i] > 1)
      return at("flag not 0 or 1");
    if (x.has_value[i] == 1 && !std::isfinite(x.value[i]))
      return at("non-finite value");
  }
  return {};
}

dice::payload pack_steps(const step_columns& x, std::uint32_t origin,
                         std::int64_t model_version) {
  std::vector<std::uint8_t> buf;
  {
    namespace io = boost::iostreams;
    io::stream<dice::detail::byte_sink> out{dice::detail::byte_sink{&buf}};
    boost::archive::binary_oarchive ar(out);
    ar << x;
  }
  return dice::payload{shared_bytes{std::move(buf)}, x.size(), origin,
                       model_version};
}

caf::expected<step_columns> unpack_steps(const dice::payload& x) {
  auto reject = [](std::string what) {
    dice::count(trust_event::payload_rejected);
    return make_error(errc::malformed_input, std::move(what));
  };
  if (x.bytes.empty())
    return reject("empty payload");
  // Every step takes at least one byte per column: a count beyond the
  // bytes is a lie.
  if (x.count > x.bytes.size())
    return reject("payload claims " + std::to_string(x.count) + " steps in "
                  + std::to_string(x.bytes.size()) + " bytes");
  step_columns out;
  try {
    bounded_streambuf buf{x.bytes.data(), x.bytes.size()};
    bounded_iarchive ar(buf);
    ar >> out;
  } catch (const std::exception& e) {
    return reject(std::string{"cannot decode steps: "} + e.what());
  }
  if (out.size() != x.count)
    return reject("payload holds " + std::to_string(out.size())
                  + " steps but claims " + std::to_string(x.count));
  auto why = check(out);
  if (!why.empty())
    return reject(why);
  return out;
}

std::string check(const episode_record& x) {
  if (!std::isfinite(x.ret))
    return "non-finite episode return";
  if (x.length < 1)
    return "episode length " + std::to_string(x.length);
  return {};
}

// -- cutting segments ---------------------------------------------------------

namespace {

caf::error refuse_batch(intake_counters& counters, std::string why) {
  ++counters.batches_rejected;
  counters.last_error = why;
  return make_error(errc::malformed_input, std::move(why));
}

// Refuses the batch unless `end_idx` cuts the `first` offsets cleanly.
caf::error check_end_idx(const std::vector<dice::payload>& trajectories,
                         const std::vector<std::int64_t>& first,
                         const std::vector<std::int64_t>& end_idx,
                         intake_counters& counters) {
  auto total = first.back();
  // Increasing, inside the list, the last step closing the last segment.
  for (std::size_t i = 0; i < end_idx.size(); ++i) {
    auto x = end_idx[i];
    if (x < 0 || x >= total)
      return refuse_batch(counters,
                          "trajectory_end_idx " + std::to_string(x)
                            + " outside the " + std::to_string(total)
                            + " merged steps");
    if (i > 0 && x <= end_idx[i - 1])
      return refuse_batch(counters,
                          "trajectory_end_idx not increasing at position "
                            + std::to_string(i) + " (" + std::to_string(x)
                            + " after " + std::to_string(end_idx[i - 1])
                            + "): indices not offset per collector?");
  }
  if (total > 0 && (end_idx.empty() || end_idx.back() != total - 1))
    return refuse_batch(counters,
                        "the last of " + std::to_string(total)
                          + " steps ends no trajectory");
  // No segment may span two payloads (two collectors, or two iterations of
  // one, acted with different models and envs).
  std::size_t k = 0;
  for (std::size_t p = 0; p < trajectories.size(); ++p) {
    if (first[p + 1] == first[p])
      continue;
    auto last = first[p + 1] - 1;
    while (k < end_idx.size() && end_idx[k] < last)
      ++k;
    if (k == end_idx.size() || end_idx[k] != last)
      return refuse_batch(counters,
                          "payload " + std::to_string(p) + " (from node "
                            + std::to_string(trajectories[p].origin)
                            + ") ends inside a trajectory");
  }
  return caf::none;
}

} // namespace

caf::expected<segment_batch>
cut_segments(const std::vector<dice::payload>& trajectories,
             const std::vector<std::int64_t>& end_idx,
             const intake_options& opts, intake_counters& counters,
             lag_summary& lags) {
  // Where each payload's steps sit in the flattened list, by the counts the
  // payloads claim: the context exchanger offsets end indices by the same
  // counts, so they stay meaningful even when a payload turns out bad.
  std::vector<std::int64_t> first(trajectories.size() + 1, 0);
  for (std::size_t p = 0; p < trajectories.size(); ++p) {
    auto n = trajectories[p].count;
    if (n
        > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))
      return refuse_batch(counters,
                          "payload claims " + std::to_string(n) + " steps");
    first[p + 1] = first[p] + static_cast<std::int64_t>(n);
  }
  if (auto err = check_end_idx(trajectories, first, end_idx, counters))
    return err;
  segment_batch out;
  out.steps.layout = opts.layout;
  auto adopt_layout = opts.layout.obs_dim == 0;
  std::size_t k = 0; // next end index
  for (std::size_t p = 0; p < trajectories.size(); ++p) {
    auto& pl = trajectories[p];
    if (pl.count == 0)
      continue;
    auto claimed = static_cast<std::int64_t>(pl.count);
    // This payload's segments: end indices within [first[p], first[p+1]).
    std::vector<std::int64_t> ends;
    while (k < end_idx.size() && end_idx[k] < first[p + 1])
      ends.push_back(end_idx[k++] - first[p]);
    auto items = unpack_steps(pl);
    std::string bad;
    if (!items)
      bad = dice::render(items.error());
    else if (adopt_layout)
      out.steps.layout = items->layout;
    else if (items->layout != out.steps.layout)
      bad = "layout " + to_string(items->layout) + ", expected "
        + to_string(out.steps.layout);
    if (!bad.empty()) {
      ++counters.payloads_rejected;
      counters.steps_rejected += claimed;
      counters.last_error = "payload from node " + std::to_string(pl.origin)
        + " refused: " + bad;
      continue;
    }
    adopt_layout = false;
    auto version = std::max<std::int64_t>(pl.model_version, 0);
    auto lag = opts.learner_version - version;
    counters.steps_received += claimed;
    counters.segments_received += static_cast<std::int64_t>(ends.size());
    if (lag < 0) {
      counters.steps_dropped_future += claimed;
      continue;
    }
    lags.add(lag, claimed);
    if (opts.max_lag >= 0 && lag > opts.max_lag) {
      counters.steps_dropped_stale += claimed;
      counters.segments_dropped_stale += static_cast<std::int64_t>(ends.size());
      continue;
    }
    // The end indices cover the payload's last step (checked above), so
    // the segments are exactly its rows.
    out.steps.append(*items, 0, items->size());
    std::int64_t start = 0;
    for (auto e : ends) {
      for (auto i = start; i <= e; ++i) {
        out.segment_end.push_back(i == e ? 1 : 0);
        out.version.push_back(version);
        out.lag.push_back(lag);
      }
      ++out.segments;
      start = e + 1;
    }
  }
  return out;
}

std::vector<std::uint8_t> trajectory_flags(const segment_batch& b) {
  std::vector<std::uint8_t> flags(b.size());
  for (std::size_t i = 0; i < b.size(); ++i)
    flags[i] = b.segment_end[i] | b.steps.terminated[i] | b.steps.truncated[i];
  return flags;
}

std::vector<std::uint8_t>
dingengine_flags(const step_columns& steps,
                 const std::vector<std::int64_t>& end_idx) {
  std::vector<std::uint8_t> flags(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i)
    flags[i] = steps.terminated[i] | steps.truncated[i];
  for (auto x : end_idx)
    if (x >= 0 && x < static_cast<std::int64_t>(steps.size()))
      flags[static_cast<std::size_t>(x)] = 1;
  return flags;
}

void merge_context(std::vector<dice::payload>& trajectories,
                   std::vector<std::int64_t>& end_idx,
                   const std::vector<dice::payload>& more,
                   const std::vector<std::int64_t>& more_end_idx, bool offset) {
  auto base = offset ? static_cast<std::int64_t>(dice::item_count(trajectories))
                     : 0;
  trajectories.insert(trajectories.end(), more.begin(), more.end());
  for (auto x : more_end_idx)
    end_idx.push_back(x + base);
}

} // namespace dice::rl
