#include "dice/actors/role_actor.hpp"

#include "dice/runtime/scheduling.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "caf/actor_system.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/send.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <iostream>
#include <mutex>
#include <random>

namespace dice {

namespace {

// Deadlines beyond this are treated as "no deadline": no timer is armed.
constexpr auto no_deadline = std::chrono::hours{24 * 365};

std::uint64_t random_incarnation() {
  std::random_device rd;
  std::uint64_t x = (std::uint64_t{rd()} << 32) ^ rd();
  return x == 0 ? 1 : x;
}

std::mutex stdout_mtx;

using role_ptr = role_actor::stateful_pointer<role_state>;

// A role actor takes messages only from actors of its own node that name
// themselves and that no other node can name (its router, its loaders, its
// node's launcher); nothing else can reach it, but a sender-less message
// would look the same from anywhere.
bool admit(role_ptr self, const char* what) {
  auto& src = self->current_sender();
  auto kind = classify(src, self->system());
  if (kind == sender_kind::local)
    return true;
  self->state.drops.drop(self->state.cfg.node,
                         kind == sender_kind::anonymous
                           ? trust_event::anonymous_dropped
                           : trust_event::stranger_dropped,
                         src, what,
                         "a role actor takes messages from its own node only",
                         self->clock().now());
  return false;
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

// -- node_services ------------------------------------------------------------

std::uint32_t role_state::node_id() const {
  return cfg.node;
}

role_set role_state::roles() const {
  return cfg.roles;
}

std::uint64_t role_state::incarnation() const {
  return cfg.incarnation;
}

void role_state::subscribe(const std::string& topic, handler fn) {
  auto& hs = handlers[topic];
  hs.push_back(std::move(fn));
  // Before joining, subscriptions travel with the join request.
  if (joined && hs.size() == 1)
    self->send(cfg.router, subscribe_atom::value, topic, cfg.node,
               caf::actor_cast<caf::actor>(self));
}

void role_state::publish(const std::string& topic, caf::message msg) {
  self->send(cfg.router, publish_atom::value, topic, cfg.node, std::move(msg));
}

caf::actor_clock::time_point role_state::now() const {
  return self->clock().now();
}

bool role_state::finished() const {
  return finishing;
}

void role_state::request_finish(std::string reason) {
  on_finish(finish{cfg.node, std::move(reason), false}, true);
}

void role_state::flush_before_done(caf::actor worker) {
  if (worker
      && std::find(flush_targets.begin(), flush_targets.end(), worker)
        == flush_targets.end()) {
    // A loader that dies takes what it holds with it: noticed, not silent.
    self->monitor(worker);
    flush_targets.push_back(std::move(worker));
  }
}

caf::actor role_state::handle() {
  return caf::actor_cast<caf::actor>(self);
}

caf::actor role_state::router_handle() {
  return caf::actor_cast<caf::actor>(cfg.router);
}

void role_state::load(const caf::actor& loader, const storage_ref& ref,
                      const std::string& topic) {
  ++pending_loads;
  // The loader sends (topic, item) to this actor before it answers, so the
  // item is dispatched before the answer arrives.
  self
    ->request(loader, cfg.load_timeout, load_atom::value, ref,
              caf::actor_cast<caf::actor>(self), topic)
    .then(
      [this](bool) {
        load_done();
      },
      [this, path = ref.path](caf::error& err) {
        log::warning(cfg.node,
                     "no answer to a load of " + path + ": " + render(err));
        load_done();
      });
}

void role_state::quit_when(std::function<bool()> settled) {
  quit_conditions.push_back(std::move(settled));
}

void role_state::schedule(caf::timespan delay, std::function<void()> fn) {
  auto id = ++timer_id;
  timers.emplace(id, std::move(fn));
  self->delayed_send(self, delay, timer_atom::value, id);
}

void role_state::on_peer_event(peer_handler fn) {
  peer_handlers.push_back(std::move(fn));
}

node_report& role_state::report() {
  return rep;
}

caf::actor_system& role_state::system() {
  return self->system();
}

std::string role_state::spool_dir() const {
  return cfg.spool_dir;
}

bool role_state::spool_fsync() const {
  return cfg.spool_fsync;
}

// -- iteration engine ---------------------------------------------------------

void role_state::init(role_config config, pipeline p) {
  cfg = std::move(config);
  pipe = std::move(p);
  if (cfg.incarnation == 0)
    cfg.incarnation = random_incarnation();
  rep.node = cfg.node;
  rep.roles = cfg.roles;
  rep.restarts = cfg.restarts;
  started = !cfg.wait_for_start;
  for (auto& stage : pipe.stages())
    if (stage.attach)
      stage.attach(*this);
  std::vector<std::string> topics;
  for (auto& kvp : handlers)
    topics.push_back(kvp.first);
  // A node without its router can neither receive nor publish: it must say so
  // and stop, never run on headless.
  self->monitor(cfg.router);
  self->set_down_handler([this](caf::down_msg& dm) {
    if (quitted)
      return;
    auto loader = std::find_if(flush_targets.begin(), flush_targets.end(),
                               [&](const caf::actor& x) {
                                 return x.address() == dm.source;
                               });
    if (loader != flush_targets.end()) {
      flush_targets.erase(loader);
      auto why = "error: a loader stopped (" + caf::to_string(dm.reason) + ")";
      log::error(cfg.node, why);
      on_finish(finish{cfg.node, why, true});
      return;
    }
    if (dm.source != cfg.router.address())
      return;
    auto why = "error: the router stopped (" + caf::to_string(dm.reason)
      + "); this node can no longer reach its peers";
    log::error(cfg.node, why);
    running = false;
    stopped = true;
    stop_reason = why;
    rep.failed = true;
    quit_now();
  });
  // CAF's default error handler would stop the actor.
  self->set_error_handler([this](caf::error& err) {
    drops.drop(cfg.node, trust_event::stranger_dropped, self->current_sender(),
               "an error message (" + render(err) + ")",
               "nobody sends a role actor errors", self->clock().now());
  });
  self
    ->request(cfg.router, std::chrono::seconds{30}, join_atom::value, cfg.node,
              cfg.roles, caf::actor_cast<caf::actor>(self), std::move(topics))
    .then(
      [this](const std::vector<finish>& done) {
        joined = true;
        for (auto& rp : ready_waiters)
          rp.deliver(true);
        ready_waiters.clear();
        if (!done.empty()) {
          on_finish(done.front());
          return;
        }
        maybe_start();
      },
      [this](caf::error& err) {
        log::error(cfg.node, "cannot join the router: " + caf::to_string(err));
        for (auto& rp : ready_waiters)
          rp.deliver(err);
        ready_waiters.clear();
        rep.stop_reason = "error: cannot join the router";
        rep.failed = true;
        stop(rep.stop_reason);
      });
}

void role_state::on_middleware_error(const std::string& what) {
  if (cfg.restarts_left > 0 && !finishing) {
    // Like a crashed process: no finish, no done, no stop hooks; the router
    // drops this member when it goes down, and the supervisor starts a new
    // incarnation (fresh context, new incarnation) that joins again.
    log::error(cfg.node,
               what + "; restarting the role actor ("
                 + std::to_string(cfg.restarts_left) + " restart(s) left)");
    quitted = true;
    pending.reset();
    self->quit(make_error(errc::user_exception, what));
    return;
  }
  log::error(cfg.node, what);
  on_finish(finish{cfg.node, "error: " + what, true}, true);
}

void role_state::maybe_start() {
  if (joined && started && !running && !finishing) {
    running = true;
    self->send(self, iterate_atom::value);
  }
}

void role_state::iterate() {
  cursor = 0;
  advance();
}

void role_state::advance() {
  auto& stages = pipe.stages();
  try {
    while (cursor < stages.size()) {
      auto& stage = stages[cursor];
      if (stage.before) {
        auto next = stage.before(ctx);
        if (next && !arm(std::move(*next)))
          return; // waiting; a message, the deadline or finish resumes us
      }
      ++cursor;
    }
    for (auto i = stages.size(); i-- > 0;)
      if (stages[i].after)
        stages[i].after(ctx);
  } catch (const std::exception& e) {
    auto name = cursor < stages.size() ? stages[cursor].name : "pipeline";
    on_middleware_error("middleware '" + name + "' threw: " + e.what());
    if (quitted)
      return;
  }
  end_iteration();
}

bool role_state::arm(wait_for w) {
  for (;;) {
    if (finishing && pending_loads == 0) {
      // Waits end early on finish (DI-engine's ME/PME; dice's CE too),
      // once what this node is still loading has arrived.
      w.resume(ctx, wait_outcome::finished);
      return true;
    }
    if (!w.ready || w.ready()) {
      auto next = w.resume(ctx, wait_outcome::ready);
      if (!next)
        return true;
      w = std::move(*next);
      continue;
    }
    auto id = ++wait_id;
    if (w.timeout < no_deadline)
      self->delayed_send(self, w.timeout, deadline_atom::value, id);
    pending = std::move(w);
    return false;
  }
}

void role_state::resume(wait_outcome outcome) {
  if (!pending)
    return;
  auto w = std::move(*pending);
  pending.reset();
  ++wait_id; // invalidates the deadline message of the wait that ended
  if (outcome == wait_outcome::timed_out)
    ++rep.timeouts;
  try {
    auto next = w.resume(ctx, outcome);
    if (next && !arm(std::move(*next)))
      return;
  } catch (const std::exception& e) {
    on_middleware_error("middleware '" + pipe.stages()[cursor].name
                        + "' threw: " + e.what());
    if (!quitted)
      end_iteration();
    return;
  }
  ++cursor;
  advance();
}

void role_state::dispatch(const std::string& topic,
                          const caf::type_erased_tuple& msg) {
  auto i = handlers.find(topic);
  if (i == handlers.end()) {
    // Nobody here asked for it: a confused or hostile sender; count it so
    // that it is visible, and keep running.
    count(trust_event::unknown_topic);
    log::debug(cfg.node, "ignored a message on unsubscribed topic {}", topic);
    return;
  }
  try {
    for (auto& fn : i->second)
      fn(msg);
  } catch (const std::exception& e) {
    log::error(cfg.node, "handler for topic " + topic + " threw: " + e.what());
  }
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  maybe_quit();
}

void role_state::on_finish(const finish& x, bool in_step) {
  if (finishing)
    return;
  finishing = true;
  if (stop_reason.empty()) {
    stop_reason = x.sender == cfg.node
      ? x.reason
      : "finish from node " + std::to_string(x.sender) + " (" + x.reason + ")";
    rep.failed = x.failed && x.sender == cfg.node;
  }
  // This node's own finish goes to the router from stop(), after the data of
  // its last iteration (and what its workers still store and publish).
  if (x.sender == cfg.node && !finish_sent)
    own_finish = x;
  if (pending)
    end_wait_if_finished();
  else if (!in_step)
    stop(stop_reason); // between iterations: nothing left to finish
}

void role_state::end_wait_if_finished() {
  // A load still outstanding may be what the wait is for (a peer stored its
  // last delta before its finish): let it arrive first.
  if (pending && finishing && pending_loads == 0)
    resume(wait_outcome::finished);
}

void role_state::load_done() {
  if (pending_loads > 0)
    --pending_loads;
  if (pending_loads > 0)
    return;
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  else
    end_wait_if_finished();
  maybe_quit();
}

void role_state::maybe_quit() {
  // Loads carry data peers sent before their done; quit conditions hold
  // e.g. until a learner acknowledged this node's last deltas.
  if (!released || quitted || pending_loads > 0)
    return;
  for (auto& settled : quit_conditions)
    if (!settled())
      return;
  quit_now();
}

void role_state::on_peer(const peer_event& x) {
  for (auto& fn : peer_handlers) {
    try {
      fn(x);
    } catch (const std::exception& e) {
      log::error(cfg.node,
                 std::string{"peer event handler threw: "} + e.what());
    }
  }
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  maybe_quit();
}

void role_state::on_timer(std::uint64_t id) {
  auto i = timers.find(id);
  if (i == timers.end())
    return;
  auto fn = std::move(i->second);
  timers.erase(i);
  if (quitted)
    return;
  try {
    fn();
  } catch (const std::exception& e) {
    log::error(cfg.node, std::string{"timer handler threw: "} + e.what());
  }
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  maybe_quit();
}

void role_state::end_iteration() {
  ++rep.iterations;
  // DI-engine breaks before renew(): report the index of the last iteration
  // that ran, not of one that was renewed but never ran.
  rep.total_step = ctx.total_step;
  if (!finishing && cfg.max_step > 0 && rep.iterations >= cfg.max_step)
    on_finish(finish{cfg.node, "max_step", false}, true);
  if (finishing) {
    stop(stop_reason);
    return;
  }
  ctx.renew();
  self->send(self, iterate_atom::value);
}

void role_state::stop(const std::string& reason) {
  if (stopped)
    return;
  stopped = true;
  running = false;
  stop_reason = reason;
  drain_id = ++wait_id;
  self->delayed_send(self, cfg.drain_timeout, deadline_atom::value, drain_id);
  if (flush_targets.empty()) {
    send_done();
    return;
  }
  // A loader publishes what it stored straight to the router: flush it first,
  // so that the router sees those publishes before this node's finish and
  // done.
  pending_flushes = flush_targets.size();
  for (auto& worker : flush_targets)
    self->request(worker, cfg.drain_timeout, flush_atom::value)
      .then(
        [this](bool) {
          if (--pending_flushes == 0)
            send_done();
        },
        [this](caf::error& err) {
          log::warning(cfg.node,
                       "a loader did not flush before the node "
                       "stopped: "
                         + render(err));
          if (--pending_flushes == 0)
            send_done();
        });
}

void role_state::send_done() {
  if (!finish_sent) {
    // Tell the router in any case: a node that stops ends the run.
    finish_sent = true;
    self->send(cfg.router,
               own_finish ? *own_finish : finish{cfg.node, stop_reason, false});
  }
  self->send(cfg.router, done_atom::value, cfg.node,
             caf::actor_cast<caf::actor>(self));
}

void role_state::quit_now() {
  if (quitted)
    return;
  quitted = true;
  for (auto& stage : pipe.stages()) {
    if (!stage.on_stop)
      continue;
    try {
      stage.on_stop(ctx);
    } catch (const std::exception& e) {
      log::error(cfg.node,
                 "stop hook of '" + stage.name + "' threw: " + e.what());
    }
  }
  rep.env_step = ctx.env_step;
  rep.env_episode = ctx.env_episode;
  rep.train_iter = ctx.train_iter;
  rep.model_version = ctx.model_version;
  rep.stop_reason = stop_reason;
  if (cfg.print_report) {
    std::lock_guard<std::mutex> guard{stdout_mtx};
    std::cout << to_json(rep) << std::endl;
  }
  if (cfg.report_to)
    caf::send_as(caf::actor_cast<caf::actor>(self), cfg.report_to, rep);
  self->quit();
}

// -- behaviour ----------------------------------------------------------------

role_actor::behavior_type
role_behavior(role_actor::stateful_pointer<role_state> self, role_config cfg,
            pipeline pipe) {
  self->state.init(std::move(cfg), std::move(pipe));
  return {
    [=](const std::string& topic, const context_delta&) {
      if (admit(self, "a delta"))
        self->state.dispatch(topic, self->current_mailbox_element()->content());
    },
    [=](const std::string& topic, const model_snapshot&) {
      if (admit(self, "a snapshot"))
        self->state.dispatch(topic, self->current_mailbox_element()->content());
    },
    [=](const std::string& topic, const storage_ref&) {
      if (admit(self, "a storage reference"))
        self->state.dispatch(topic, self->current_mailbox_element()->content());
    },
    [=](const std::string& topic, const std::string&) {
      if (admit(self, "a text message"))
        self->state.dispatch(topic, self->current_mailbox_element()->content());
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
      if (st.stopped) {
        if (id == st.drain_id) {
          log::warning(st.cfg.node,
                       st.released
                         ? "loads or acknowledgements still outstanding at "
                           "the drain timeout; stopping anyway"
                         : "not every peer finished within the drain "
                           "timeout; stopping anyway");
          st.quit_now();
        }
        return;
      }
      if (st.pending && id == st.wait_id)
        st.resume(wait_outcome::timed_out);
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
