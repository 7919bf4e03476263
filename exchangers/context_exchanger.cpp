#include "dice/exchangers/context_exchanger.hpp"

#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "caf/send.hpp"

#include "context_exchanger_state.hpp"
#include "loader_bridge.hpp"

#include <memory>

// DI-engine's ContextExchanger merge rules: what each role sends, what each
// role takes, and when it waits. Reliable delivery (acks, resend, window,
// spool, the learner's cap) is context_delivery.{hpp,cpp}.

namespace dice {

std::string context_topic(role r) {
  return std::string{"context_exchanger_"} + to_string(r);
}

std::string context_ack_topic(std::uint32_t collector) {
  return "context_ack_" + std::to_string(collector);
}

namespace detail {

// DI-engine's `merge`: increments add up on non-collectors, everything
// else overwrites.
void context_exchanger_state::merge(context& ctx) {
  box.merge_into(svc->node_id(), ctx);
  delivery.buffer_merged();
  // Held deltas the buffer refused (or whose owner changed) go now.
  for (auto& key : early.streams())
    drain_held(key);
  // Acks go out once the data is in the context, so a collector's window
  // also bounds what waits here (learner backpressure); in a group, once
  // the group counted it (context_partition::ack_now).
  if (!opts.partition || !opts.partition->defer_acks)
    delivery.ack_merged();
}

step context_exchanger_state::wait_for_context(caf::timespan timeout) {
  auto resume = [this](context& ctx, wait_outcome outcome) -> step {
    if (outcome == wait_outcome::timed_out)
      log::warning(svc->node_id(),
                   "Timeout when waiting for new context! Node id: "
                     + std::to_string(svc->node_id()));
    merge(ctx);
    return proceed;
  };
  return wait_for{[this] {
                    return box.any;
                  },
                  timeout, resume};
}

step context_exchanger_state::before(context& ctx) {
  if (!active)
    return proceed;
  delivery.republish_recovered();
  if (delivery.window_full()) {
    // Backpressure: produce nothing more until the learner caught up.
    ++stats->window_waits;
    wait_started = svc->now();
    return wait_for{
      [this] {
        return !delivery.window_full();
      },
      opts.window_timeout,
      [this](context& ctx, wait_outcome outcome) -> step {
        stats->window_wait_ns += std::chrono::duration_cast<
                                   std::chrono::nanoseconds>(svc->now()
                                                             - wait_started)
                                   .count();
        if (outcome == wait_outcome::timed_out && delivery.unacked() > 0) {
          log::warning(svc->node_id(),
                       "no ack within the window timeout; giving up on "
                       "resending the oldest unacknowledged delta");
          delivery.evict_oldest();
        }
        return before_context(ctx);
      }};
  }
  return before_context(ctx);
}

step context_exchanger_state::before_context(context& ctx) {
  if (has(role::learner)) {
    // The learner always waits for data, but (unlike DI-engine) only up to
    // a deadline and never past finish.
    if (!box.any && !svc->finished())
      return wait_for_context(opts.learner_timeout);
  } else if (ctx.total_step >= opts.skip_n_iter && !box.any
             && !svc->finished()) {
    return wait_for_context(opts.timeout);
  }
  merge(ctx);
  return proceed;
}

// DI-engine's `fetch`: which fields a sender's roles contribute.
void context_exchanger_state::after(context& ctx) {
  if (!active)
    return;
  context_delta d;
  if (has(role::collector)) {
    d.env_step = ctx.env_step - sent_env_step;
    sent_env_step = ctx.env_step;
    d.env_episode = ctx.env_episode - sent_env_episode;
    sent_env_episode = ctx.env_episode;
    d.trajectories = ctx.trajectories;
    d.episodes = ctx.episodes;
    d.trajectory_end_idx = ctx.trajectory_end_idx;
    d.has_trajectory_end_idx = true;
  }
  if (has(role::learner))
    d.train_iter = ctx.train_iter;
  if (empty(d))
    return;
  d.sender = svc->node_id();
  d.incarnation = svc->incarnation();
  d.seq = delivery.next_seq();
  d.sender_roles = roles;
  d.model_version = ctx.model_version;
  if (has(role::collector))
    ++stats->deltas_sent;
  if (!delivery.tracking()) {
    d.base = d.seq;
    delivery.emit(d);
    return;
  }
  delivery.send_tracked(std::move(d));
}

} // namespace detail

using detail::context_exchanger_state;

middleware context_exchanger(context_exchanger_options opts) {
  auto stats = opts.stats ? opts.stats
                          : std::make_shared<context_exchange_stats>();
  auto st = std::make_shared<context_exchanger_state>(opts, stats);
  middleware result;
  result.name = "context_exchanger";
  result.attach = [st](node_services& svc) {
    st->svc = &svc;
    st->roles = svc.roles();
    st->delivery.attach(svc, st->roles, false);
    if (st->roles.empty()) {
      log::warning(svc.node_id(),
                   "The task does not have any roles defined, "
                   "the ContextExchanger will not work.");
      return;
    }
    if (st->roles.size() > 1)
      log::warning(svc.node_id(),
                   "Use multiple roles in one exchanger may lead to "
                   "unexpected result, please check your code.");
    st->active = true;
    st->delivery.attach(svc, st->roles, true);
    if (auto& p = st->opts.partition) {
      std::weak_ptr<context_exchanger_state> weak = st;
      p->ack_now = [weak] {
        if (auto s = weak.lock())
          s->delivery.ack_merged();
      };
      p->watermark = [weak](std::uint32_t c) {
        std::pair<std::uint64_t, std::uint64_t> result{0, 0};
        if (auto s = weak.lock()) {
          auto& d = s->delivery;
          auto i = d.last_incarnation.find(c);
          if (i != d.last_incarnation.end())
            result = {i->second, d.applied.upto({c, i->second})};
        }
        return result;
      };
      p->settle = [weak](std::uint32_t c, std::uint64_t incarnation,
                         std::uint64_t upto) {
        if (auto s = weak.lock()) {
          s->delivery.settle({c, incarnation}, upto);
          log::debug(s->svc->node_id(), "settled node {} up to {}", c, upto);
          s->delivery.last_incarnation[c] = incarnation;
        }
      };
    }
    if (st->opts.storage_loader)
      svc.flush_before_done(st->opts.storage_loader);
    // Subscribe to every role this node does not have: deltas, or the
    // references a storage loader published for them.
    for (auto r : all_roles) {
      if (st->has(r))
        continue;
      auto name = context_topic(r);
      svc.on(topic<context_delta>{name}, [st](const context_delta& d) {
        st->put(d);
      });
      svc.on(topic<storage_ref>{name}, [st, name](const storage_ref& ref) {
        detail::load_reference(*st->svc, st->opts.storage_loader, name, ref);
      });
    }
    auto& delivery = st->delivery;
    if (delivery.tracking()) {
      auto dir = st->opts.spool_dir.empty() ? svc.spool_dir()
                                            : st->opts.spool_dir;
      if (!dir.empty() && dir != "-")
        delivery.open_spool(dir, st->opts.spool_fsync || svc.spool_fsync());
      svc.on(topic<context_ack>{context_ack_topic(svc.node_id())},
             [st](const context_ack& ack) {
               st->delivery.on_ack(ack);
             });
      svc.on_peer_event([st](const peer_event& ev) {
        st->delivery.on_peer(ev);
      });
      // Exactly-once to the end: the node stays (bounded by its drain
      // timeout, resending meanwhile) until a learner acknowledged its last
      // deltas; with a storage loader, the files stay that long too. With
      // no learner ever heard from (none connected, no ack), nobody will
      // ack; nor once every learner it was connected to is lost (a learner
      // that stopped first: waiting out the drain raced dice-launch's own
      // stop timeout, and lost the same deltas, only 10 s later). A
      // connected learner that has not acked yet is waited for: its first
      // ack may hang on a delta lost before it subscribed, which the stop
      // resends; quitting at once removed the stored deltas it was still
      // loading (CI: a SIGTERM early in a shm run lost 32 of 224 steps).
      svc.quit_when([st] {
        auto& d = st->delivery;
        return d.nothing_unacked() || !d.heard_of_learner()
          || d.learners_gone();
      });
    }
  };
  result.before = [st](context& ctx) {
    return st->before(ctx);
  };
  result.after = [st](context& ctx) {
    st->after(ctx);
  };
  // Whatever arrived after the last merge still counts: a learner's final
  // env_step equals the sum of what its collectors sent.
  result.on_stop = [st](context& ctx) {
    if (st->active && st->box.any)
      st->merge(ctx);
    // The run is over: what was merged is acknowledged (a group's last
    // count follows in its own stop hook).
    if (st->active && st->has(role::learner))
      st->delivery.ack_merged();
    if (st->delivery.tracking() && st->delivery.learners_gone())
      st->delivery.report_abandoned();
    st->delivery.close_spool();
    if (st->active) {
      auto& x = *st->stats;
      log::info(st->svc->node_id(),
                "context exchange: sent " + std::to_string(x.deltas_sent)
                  + ", resent " + std::to_string(x.deltas_resent) + " ("
                  + std::to_string(x.deltas_resent_on_connect)
                  + " on reconnect, " + std::to_string(x.deltas_fast_resent)
                  + " fast)" + ", spooled " + std::to_string(x.deltas_spooled)
                  + ", recovered " + std::to_string(x.deltas_recovered)
                  + ", unacked at stop "
                  + std::to_string(st->delivery.unacked()) + ", window waits "
                  + std::to_string(x.window_waits) + ", acks sent "
                  + std::to_string(x.acks_sent) + ", refused "
                  + std::to_string(x.deltas_refused));
    }
    // DI-engine: shutdown on task.once("finish").
    if (st->opts.storage_loader)
      caf::anon_send_exit(st->opts.storage_loader,
                          caf::exit_reason::user_shutdown);
  };
  return result;
}

} // namespace dice
