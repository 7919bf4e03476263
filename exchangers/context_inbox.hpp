#pragma once

// Internal: DI-engine's `_state` of the ContextExchanger, what arrived since
// the last merge, with the checks that keep hostile increments and offsets
// from overflowing it. The role actor is single-threaded, so unlike
// DI-engine nothing can arrive between reading and resetting it.

#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/security/trust.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dice::detail {

/// What arrived since the last merge.
struct context_inbox {
  /// Anything arrived.
  bool any = false;
  /// Summed env_step increments.
  std::optional<std::int64_t> env_step;
  /// Summed env_episode increments.
  std::optional<std::int64_t> env_episode;
  /// The latest train_iter.
  std::optional<std::int64_t> train_iter;
  /// Trajectories, in arrival order.
  std::optional<std::vector<payload>> trajectories;
  /// Episodes, in arrival order.
  std::optional<std::vector<payload>> episodes;
  /// Trajectory ends, offset into `trajectories`.
  std::optional<std::vector<std::int64_t>> trajectory_end_idx;
  /// Which deltas were applied (a learner's), in order.
  std::vector<merged_delta> merged;

  /// Payload bytes of `d`.
  static std::size_t bytes_of(const context_delta& d) {
    return payload_bytes(d);
  }

  /// `out = x + y`; false on overflow.
  static bool add(std::int64_t x, std::int64_t y, std::int64_t& out) {
    return !__builtin_add_overflow(x, y, &out);
  }

  /// Why `d` (from the wire) cannot be applied, or nullptr. Checked before
  /// anything changes: every sum the exchanger's put() computes again cannot
  /// overflow once this passed.
  const char* why_invalid(const context_delta& d) const {
    if (auto why = sequence_error(d))
      return why;
    // No list can hold more items than it has bytes (what unpack checks
    // too), so item counts and offsets stay within memory sizes.
    for (auto* xs : {&d.trajectories, &d.episodes})
      for (auto& x : *xs)
        if (x.count > x.bytes.size())
          return "a payload claims more items than bytes";
    std::int64_t sum = 0;
    if (d.env_step && !add(env_step.value_or(0), *d.env_step, sum))
      return "env_step increment overflows";
    if (d.env_episode && !add(env_episode.value_or(0), *d.env_episode, sum))
      return "env_episode increment overflows";
    auto offset = static_cast<std::int64_t>(
      trajectories ? item_count(*trajectories) : 0);
    for (auto idx : d.trajectory_end_idx)
      if (!add(idx, offset, sum))
        return "trajectory_end_idx overflows";
    return nullptr;
  }

  /// Adds `x` to a context counter; a sum past the int64 range (only hostile
  /// or corrupt increments get there) leaves the counter as it was.
  static void add_to(std::uint32_t node, std::int64_t& counter, std::int64_t x,
                     const char* what) {
    std::int64_t sum = 0;
    if (add(counter, x, sum)) {
      counter = sum;
      return;
    }
    count(trust_event::message_rejected);
    log::error(node,
               std::string{"dropped an "} + what
                 + " increment that would overflow");
  }

  /// DI-engine's `merge`: increments add up on non-collectors, everything
  /// else overwrites; empties the inbox.
  void merge_into(std::uint32_t node, context& ctx) {
    if (env_step)
      add_to(node, ctx.env_step, *env_step, "env_step");
    if (env_episode)
      add_to(node, ctx.env_episode, *env_episode, "env_episode");
    if (train_iter)
      ctx.train_iter = *train_iter;
    if (trajectories)
      ctx.trajectories = std::move(*trajectories);
    if (episodes)
      ctx.episodes = std::move(*episodes);
    if (trajectory_end_idx)
      ctx.trajectory_end_idx = std::move(*trajectory_end_idx);
    ctx.merged_deltas.insert(ctx.merged_deltas.end(), merged.begin(),
                             merged.end());
    *this = context_inbox{};
  }
};

} // namespace dice::detail
