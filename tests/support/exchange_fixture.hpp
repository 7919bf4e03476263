#pragma once

// A deterministic cluster of role actors exchanging context (acks, resend,
// windows, spool): the pipelines and spawning the acks and spool tests share.

#include "actors/role_state.hpp"
#include "dice/exchangers/context_exchanger.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <map>

namespace dice::test {

/// Collectors and a learner wired by context_exchanger on the coordinator.
class exchange_fixture : public deterministic {
 protected:
  // A collector that never waits for the learner's context (only its
  // window paces it) and produces `items` per iteration.
  pipeline collector_pipe(std::uint32_t node, std::int64_t items,
                          context_exchanger_options opts) {
    opts.skip_n_iter = 1'000'000;
    pipeline p;
    p.use(dice::test::collect_integers(node, items, {items - 1}))
      .use(context_exchanger(std::move(opts)));
    return p;
  }

  pipeline learner_pipe(caf::timespan per_iteration,
                        context_exchanger_options opts) {
    pipeline p;
    p.use(dice::test::busy_for(per_iteration))
      .use(context_exchanger(std::move(opts)));
    return p;
  }

  // spawn_role with a chosen incarnation (a restarted node has a new one).
  role_actor spawn_incarnation(const router_actor& b, std::uint32_t node,
                               std::uint64_t incarnation, pipeline pipe,
                               std::int64_t max_step) {
    role_config rc;
    rc.node = node;
    rc.roles = {role::collector};
    rc.router = b;
    rc.max_step = max_step;
    rc.wait_for_start = true;
    rc.incarnation = incarnation;
    rc.report_to = caf::actor_cast<caf::actor>(sink);
    auto result = sys.spawn(role_behavior, std::move(rc), std::move(pipe));
    spawned.push_back(caf::actor_cast<caf::actor>(result));
    return result;
  }

  // reports() drains the sink, so keep what it returned across calls.
  std::size_t stopped() {
    for (auto& kvp : reports())
      got_[kvp.first] = kvp.second;
    return got_.size();
  }

  /// Every report seen so far, by node.
  std::map<std::uint32_t, node_report> got_;
};

} // namespace dice::test
