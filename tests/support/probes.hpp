#pragma once

// Middleware used by the exchanger tests: real pipeline stages that act like
// a tiny collector / learner and record what each iteration saw.

#include "dice/messages/payload.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/timespan.hpp"

#include <boost/serialization/vector.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace dice::test {

/// What a probe saw at the end of one iteration.
struct seen {
  std::int64_t total_step = 0;
  std::int64_t env_step = 0;
  std::int64_t env_episode = 0;
  std::int64_t train_iter = 0;
  std::int64_t model_version = -1;
  std::vector<payload> trajectories;
  std::vector<std::int64_t> trajectory_end_idx;
};

/// Records the context in its after-part (it runs first among the afters
/// when placed last in the pipeline).
inline middleware probe(std::shared_ptr<std::vector<seen>> log) {
  middleware m;
  m.name = "probe";
  m.after = [log](context& ctx) {
    log->push_back(seen{ctx.total_step, ctx.env_step, ctx.env_episode,
                        ctx.train_iter, ctx.model_version, ctx.trajectories,
                        ctx.trajectory_end_idx});
  };
  return m;
}

/// A collector's work: `items` integer items per iteration (value =
/// node * 1000 + running index), env_step += items, env_episode += 1,
/// trajectory ends at the given positions.
inline middleware collect_integers(std::uint32_t node, std::int64_t items,
                                   std::vector<std::int64_t> ends) {
  auto next = std::make_shared<std::int64_t>(0);
  middleware m;
  m.name = "collect";
  m.before = [=](context& ctx) -> step {
    std::vector<std::int64_t> xs;
    for (std::int64_t i = 0; i < items; ++i)
      xs.push_back(node * 1000 + (*next)++);
    ctx.env_step += items;
    ctx.env_episode += 1;
    ctx.trajectories = {pack(xs, node, ctx.model_version)};
    ctx.trajectory_end_idx = ends;
    return proceed;
  };
  return m;
}

/// A slow step: waits `d` on the (fake) clock every iteration, so messages
/// arrive while the node is busy, or collectors outpace a learner.
inline middleware busy_for(caf::timespan d) {
  middleware m;
  m.name = "busy";
  m.before = [d](context&) -> step {
    return wait_for{[] {
                      return false;
                    },
                    d,
                    [](context&, wait_outcome) -> step {
                      return proceed;
                    }};
  };
  return m;
}

/// A learner's work: train_iter + 1 per iteration.
inline middleware count_train_iter() {
  middleware m;
  m.name = "train";
  m.before = [](context& ctx) -> step {
    ctx.train_iter += 1;
    return proceed;
  };
  return m;
}

} // namespace dice::test
