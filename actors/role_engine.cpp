// The role actor's iteration engine: DI-engine's generator middleware run
// as a state machine (before-parts, waits, after-parts), finish, drain and
// quit.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "caf/actor_system.hpp"
#include "caf/scheduled_actor.hpp"
#include "caf/send.hpp"

#include "role_state.hpp"

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

} // namespace

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
    if (cfg.hand_back)
      *cfg.hand_back = std::move(pipe); // the next incarnation runs it
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
    if (w.timeout < no_deadline)
      arm_deadline(self->clock().now() + w.timeout);
    pending = std::move(w);
    return false;
  }
}

void role_state::arm_deadline(caf::actor_clock::time_point t) {
  wait_deadline = t;
  // Every scheduled message wakes CAF's clock thread (0.17 notifies it on
  // each one), and under load that thread took the core of the actor that
  // armed the wait: a round trip through the router whose pinger waits with
  // a deadline took 23 us at p50 while learners trained, 9 us without the
  // deadline (router_latency_bench). Most waits end early, so a message in
  // flight that is due no later than `t` stays armed for the next wait
  // and, when it arrives early, re-arms for the rest (on_wait_timer).
  if (!wait_timers.empty() && wait_timers.back() <= t)
    return;
  wait_timers.push_back(t);
  self->scheduled_send(self, t, deadline_atom::value, wait_timer_id);
}

void role_state::on_wait_timer() {
  // The clock delivers in due order and only earlier deadlines were pushed:
  // the one arriving is the last in the list.
  if (!wait_timers.empty())
    wait_timers.pop_back();
  if (stopped || !pending
      || wait_deadline == caf::actor_clock::time_point::max())
    return;
  if (self->clock().now() >= wait_deadline)
    resume(wait_outcome::timed_out);
  else
    arm_deadline(wait_deadline);
}

void role_state::resume(wait_outcome outcome) {
  if (!pending)
    return;
  auto w = std::move(*pending);
  pending.reset();
  // The wait's deadline message, if any, stays in flight for the next wait.
  wait_deadline = caf::actor_clock::time_point::max();
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
  self->delayed_send(self, cfg.drain_timeout, deadline_atom::value,
                     drain_timer_id);
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

} // namespace dice
