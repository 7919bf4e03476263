// The role actor's behaviour: who may send it what, and spawning it. Its
// services to middleware are in role_services.cpp, its iteration engine in
// role_engine.cpp.

#include "dice/actors/scheduling.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "caf/actor_system.hpp"
#include "caf/scheduled_actor.hpp"

#include "role_state.hpp"

namespace dice {

namespace {

using role_ptr = role_actor::stateful_pointer<role_state>;

// A role actor takes messages only from actors of its own node that name
// themselves and that no other node can name (its router, its loaders, its
// node's launcher); nothing else can reach it, but a sender-less message
// would look the same from anywhere.
bool admit(role_ptr self, const char* what) {
  return admit_local(self, self->state.drops, self->state.cfg.node, what,
                     "a role actor takes messages from its own node only");
}

// Timers and iteration steps come from the actor itself.
bool from_self(role_ptr self, const char* what) {
  auto& src = self->current_sender();
  if (src.get() == self->ctrl())
    return true;
  self->state.drops.drop(
    self->state.cfg.node,
    src ? trust_event::stranger_dropped : trust_event::anonymous_dropped, src,
    what, "only the actor itself sends this", self->clock().now());
  return false;
}

} // namespace

role_state::role_state(role_actor::stateful_pointer<role_state> ptr)
  : self(ptr) {
  // nop
}

// -- behaviour ----------------------------------------------------------------

role_actor::behavior_type
role_behavior(role_actor::stateful_pointer<role_state> self, role_config cfg,
              pipeline pipe) {
  // CAF runs this on the actor's own thread when it is detached: lower it
  // before any middleware starts computing or LibTorch starts its threads
  // (they inherit it). A pool worker is shared and keeps its priority.
  if (cfg.detached && cfg.thread_nice != 0
      && !deterministic_scheduler(self->system())) {
    if (auto n = lower_this_thread(cfg.thread_nice))
      log::info(cfg.node,
                "role thread at nice " + std::to_string(*n)
                  + " (--dice.role-nice " + std::to_string(cfg.thread_nice)
                  + ")");
    else
      log::warning(cfg.node,
                   "role thread keeps its priority: " + render(n.error()));
  }
  self->state.init(std::move(cfg), std::move(pipe));
  return {
    [=](const std::string& topic, const context_delta& x) {
      if (admit(self, "a delta"))
        self->state.dispatch(topic, detail::topic_value::of(x));
    },
    [=](const std::string& topic, const model_snapshot& x) {
      if (admit(self, "a snapshot"))
        self->state.dispatch(topic, detail::topic_value::of(x));
    },
    [=](const std::string& topic, const storage_ref& x) {
      if (admit(self, "a storage reference"))
        self->state.dispatch(topic, detail::topic_value::of(x));
    },
    [=](const std::string& topic, const context_ack& x) {
      if (admit(self, "an ack"))
        self->state.dispatch(topic, detail::topic_value::of(x));
    },
    [=](const std::string& topic, const event& x) {
      if (admit(self, "an event"))
        self->state.dispatch(topic, detail::topic_value::of_event(x.content));
    },
    [=](const finish& x) {
      if (admit(self, "a finish"))
        self->state.on_finish(x);
    },
    [=](start_atom) {
      if (!admit(self, "a start"))
        return;
      self->state.started = true;
      self->state.maybe_start();
    },
    [=](ready_atom) -> caf::result<bool> {
      if (!admit(self, "a ready request"))
        return make_error(errc::unauthorized, "ready from a stranger");
      if (self->state.joined)
        return true;
      auto rp = self->make_response_promise<bool>();
      self->state.ready_waiters.push_back(rp);
      return rp;
    },
    [=](report_atom) -> caf::result<node_report> {
      if (!admit(self, "a report request"))
        return make_error(errc::unauthorized, "report from a stranger");
      auto rep = self->state.rep;
      auto& ctx = self->state.ctx;
      rep.env_step = ctx.env_step;
      rep.env_episode = ctx.env_episode;
      rep.train_iter = ctx.train_iter;
      rep.model_version = ctx.model_version;
      return rep;
    },
    [=](iterate_atom) {
      if (!from_self(self, "an iterate") || self->state.stopped)
        return;
      if (self->state.finishing)
        self->state.stop(self->state.stop_reason);
      else
        self->state.iterate();
    },
    [=](deadline_atom, std::uint64_t id) {
      if (!from_self(self, "a deadline"))
        return;
      auto& st = self->state;
      if (id != drain_timer_id) {
        st.on_wait_timer();
        return;
      }
      if (st.stopped) {
        log::warning(st.cfg.node,
                     st.released
                       ? "loads or acknowledgements still outstanding at "
                         "the drain timeout; stopping anyway"
                       : "not every peer finished within the drain "
                         "timeout; stopping anyway");
        st.quit_now();
      }
    },
    [=](timer_atom, std::uint64_t id) {
      if (from_self(self, "a timer"))
        self->state.on_timer(id);
    },
    [=](const peer_event& x) {
      // Only this node's router knows about peers.
      if (self->current_sender()
          != caf::actor_cast<caf::strong_actor_ptr>(self->state.cfg.router)) {
        admit(self, "a peer event");
        count(trust_event::message_rejected);
        return;
      }
      self->state.on_peer(x);
    },
    [=](done_atom) {
      if (!admit(self, "a done"))
        return;
      self->state.released = true;
      self->state.maybe_quit();
    },
  };
}

role_actor spawn_role(caf::actor_system& sys, role_config cfg, pipeline pipe) {
  if (cfg.detached && !deterministic_scheduler(sys))
    return sys.spawn<caf::detached>(role_behavior, std::move(cfg),
                                    std::move(pipe));
  return sys.spawn(role_behavior, std::move(cfg), std::move(pipe));
}

} // namespace dice
