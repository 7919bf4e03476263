#pragma once

// Internal: the context exchanger's state (DI-engine's ContextExchanger):
// what it received and merges (context_exchanger_put.cpp), its iterations and
// the middleware (context_exchanger.cpp). Reliable delivery is
// context_delivery.{hpp,cpp}.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/pipeline/middleware.hpp"

#include "context_delivery.hpp"
#include "context_inbox.hpp"
#include "early_deltas.hpp"

#include <memory>

namespace dice::detail {

/// What one context exchanger holds; its middleware hooks share it.
struct context_exchanger_state {
  context_exchanger_state(const context_exchanger_options& x,
                          std::shared_ptr<context_exchange_stats> s)
    : opts(x), stats(std::move(s)), delivery(x, stats) {
    // nop
  }

  context_exchanger_options opts;
  std::shared_ptr<context_exchange_stats> stats;
  context_delivery delivery;
  node_services* svc = nullptr;
  role_set roles;
  bool active = false;
  context_inbox box;
  // What a collector sent last, to compute increments (DI-engine's
  // `_local_state`).
  std::int64_t sent_env_step = 0;
  std::int64_t sent_env_episode = 0;

  // A learner of a group: deltas that arrived before an earlier one of
  // their stream (in_order_only).
  early_deltas early;
  // Deltas refused as inconsistent (logged every 1024th time).
  std::uint64_t malformed = 0;
  // When the current window wait began.
  caf::actor_clock::time_point wait_started;

  bool has(role r) const {
    return roles.has(r);
  }

  // -- receiving (context_exchanger_put.cpp) ---------------------------------

  void refuse_malformed(const context_delta& d, const char* why);
  // A learner of a group leaves other learners' collectors alone: no
  // apply, no ack, no record.
  bool not_owned(const context_delta& d) const;
  // DI-engine's `put`: each field goes to the roles the spec table names.
  void put(const context_delta& d);
  // A learner of a group: deltas of a stream are counted in seq order.
  bool in_order_only() const;
  void hold(const context_delta& d);
  void drain_held(const context_delivery::sender_key& key);
  // The rest of `put` for a delta that is neither a duplicate nor early:
  // false if the learner's buffer refused it.
  bool apply(const context_delta& d);

  // -- iterations (context_exchanger.cpp) -------------------------------------

  // DI-engine's `merge`: increments add up on non-collectors, everything
  // else overwrites.
  void merge(context& ctx);
  step wait_for_context(caf::timespan timeout);
  step before(context& ctx);
  step before_context(context& ctx);
  // DI-engine's `fetch`: which fields a sender's roles contribute.
  void after(context& ctx);
};

} // namespace dice::detail
