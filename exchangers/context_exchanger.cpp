#include "dice/exchangers/context_exchanger.hpp"

#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "context_delivery.hpp"
#include "context_inbox.hpp"
#include "early_deltas.hpp"
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

namespace {

struct context_exchanger_state {
  context_exchanger_state(const context_exchanger_options& x,
                          std::shared_ptr<context_exchange_stats> s)
    : opts(x), stats(std::move(s)), delivery(x, stats) {
    // nop
  }

  context_exchanger_options opts;
  std::shared_ptr<context_exchange_stats> stats;
  detail::context_delivery delivery;
  node_services* svc = nullptr;
  role_set roles;
  bool active = false;
  detail::context_inbox box;
  // What a collector sent last, to compute increments (DI-engine's
  // `_local_state`).
  std::int64_t sent_env_step = 0;
  std::int64_t sent_env_episode = 0;

  // A learner of a group: deltas that arrived before an earlier one of
  // their stream (in_order_only).
  detail::early_deltas early;
  // Deltas refused as inconsistent (logged every 1024th time).
  std::uint64_t malformed = 0;
  // When the current window wait began.
  caf::actor_clock::time_point wait_started;

  bool has(role r) const {
    return roles.has(r);
  }

  void refuse_malformed(const context_delta& d, const char* why) {
    count(trust_event::message_rejected);
    if (++malformed % 1024 == 1)
      log::warning(svc->node_id(),
                   "refused a delta from node " + std::to_string(d.sender)
                     + ": " + why);
  }

  // A learner of a group leaves other learners' collectors alone: no
  // apply, no ack, no record (their owner may change to this learner later,
  // whose stream then starts at the collector's lowest unacked delta).
  bool not_owned(const context_delta& d) const {
    auto* p = opts.partition.get();
    return p != nullptr && p->owns && has(role::learner)
      && d.sender_roles.has(role::collector) && !p->owns(d.sender);
  }

  // DI-engine's `put`: each field goes to the roles the spec table names.
  void put(const context_delta& d) {
    if (not_owned(d)) {
      ++stats->deltas_not_owned;
      return;
    }
    if (auto why = box.why_invalid(d))
      return refuse_malformed(d, why);
    auto& applied = delivery.applied;
    auto contact = applied.note(d);
    if (contact.first && contact.base > 1 && has(role::learner))
      log::info(svc->node_id(),
                "first delta from node " + std::to_string(d.sender)
                  + " (incarnation " + std::to_string(d.incarnation)
                  + ") is seq " + std::to_string(d.seq)
                  + ": its stream starts at seq " + std::to_string(contact.base)
                  + "; deltas 1.." + std::to_string(contact.base - 1)
                  + " were acknowledged by an earlier learner or given up");
    if (applied.duplicate(d)) {
      count(trust_event::duplicate_dropped);
      log::debug(svc->node_id(), "dropped duplicate delta {} from node {}",
                 d.seq, d.sender);
      // The sender resent it, so our ack may have been lost: ack again
      // (no further than before: see reack).
      if (has(role::learner))
        delivery.reack({d.sender, d.incarnation});
      return;
    }
    // A learner of a group counts a stream in order only: what it counted
    // must be exactly what its watermark (the stream's settled seq) says,
    // because a learner that takes the collector over settles to that seq.
    // A delta counted past a gap was counted twice once its resend reached
    // the new owner (LearnerGroupRun.RestartedLearnerRejoins... counted 320
    // env steps twice). Such a delta waits here, unapplied and unacked,
    // until the gap fills; the stale ack makes its collector resend the
    // missing one at once.
    if (in_order_only() && d.seq > applied.upto({d.sender, d.incarnation}) + 1)
      return hold(d);
    if (apply(d) && in_order_only())
      drain_held({d.sender, d.incarnation});
  }

  // A learner of a group: deltas of a stream are counted in seq order.
  bool in_order_only() const {
    return has(role::learner) && opts.partition && opts.partition->defer_acks;
  }

  void hold(const context_delta& d) {
    switch (early.hold(d)) {
      case detail::early_deltas::outcome::duplicate:
        count(trust_event::duplicate_dropped);
        break;
      case detail::early_deltas::outcome::full: ++stats->deltas_refused; break;
      case detail::early_deltas::outcome::held:
        ++stats->deltas_past_gap;
        log::debug(svc->node_id(),
                   "holding delta {} from node {}: {} is missing", d.seq,
                   d.sender,
                   delivery.applied.upto({d.sender, d.incarnation}) + 1);
        break;
    }
    delivery.reack({d.sender, d.incarnation});
  }

  // Applies what was held for `key` now that the gap before it filled.
  void drain_held(const detail::context_delivery::sender_key& key) {
    early.drain(
      key, delivery.applied,
      [this](const context_delta& x) {
        return not_owned(x);
      },
      [this](const context_delta& x) {
        return apply(x);
      });
  }

  // The rest of `put` for a delta that is neither a duplicate nor early:
  // false if the learner's buffer refused it.
  bool apply(const context_delta& d) {
    auto& applied = delivery.applied;
    auto bytes = detail::context_inbox::bytes_of(d);
    // While finishing, iterations are over and senders will not resend:
    // take what still arrives (their windows bound it).
    if (has(role::learner) && !svc->finished() && delivery.buffer_full(bytes)) {
      ++stats->deltas_refused;
      log::debug(svc->node_id(), "buffer full: refused delta {} from node {}",
                 d.seq, d.sender);
      return false;
    }
    applied.mark(d);
    log::debug(svc->node_id(), "applied delta {} from node {} (base {}, +{})",
               d.seq, d.sender, d.base, d.env_step.value_or(0));
    // The stream a collector sends new deltas on is its current one; a
    // resend (a restarted collector republishing its predecessor's deltas
    // from the spool, say) that is only a duplicate does not move it back.
    if (d.sender_roles.has(role::collector))
      delivery.last_incarnation[d.sender] = d.incarnation;
    // While finishing, ack at once instead of at the next merge: the last
    // iteration may already be over (on_stop merges), and the sender holds
    // its quit (and its stored files) until it heard.
    if (has(role::learner) && d.seq != 0 && svc->finished())
      delivery.send_ack({d.sender, d.incarnation});
    if (has(role::learner) && d.seq != 0)
      delivery.buffered(d, bytes);
    svc->add_to_report(report_counter::deltas_received);
    if (d.env_step && !has(role::collector)) {
      box.env_step = box.env_step.value_or(0) + *d.env_step;
      box.any = true;
    }
    if (d.env_episode && !has(role::collector)) {
      box.env_episode = box.env_episode.value_or(0) + *d.env_episode;
      box.any = true;
    }
    if (d.train_iter && !has(role::learner)) {
      box.train_iter = *d.train_iter;
      box.any = true;
    }
    if (!has(role::learner))
      return true;
    // Offsets keep each sender's trajectory_end_idx pointing into the merged
    // list (DI-engine extends them unchanged, which breaks GAE with several
    // collectors).
    auto offset = static_cast<std::int64_t>(
      box.trajectories ? item_count(*box.trajectories) : 0);
    if (!d.trajectories.empty()) {
      auto& xs = box.trajectories ? *box.trajectories
                                  : box.trajectories.emplace();
      xs.insert(xs.end(), d.trajectories.begin(), d.trajectories.end());
      svc->add_to_report(report_counter::trajectories_received,
                         static_cast<std::int64_t>(item_count(d.trajectories)));
      box.any = true;
    }
    if (!d.episodes.empty()) {
      auto& xs = box.episodes ? *box.episodes : box.episodes.emplace();
      xs.insert(xs.end(), d.episodes.begin(), d.episodes.end());
      box.any = true;
    }
    if (d.has_trajectory_end_idx) {
      auto& xs = box.trajectory_end_idx ? *box.trajectory_end_idx
                                        : box.trajectory_end_idx.emplace();
      for (auto idx : d.trajectory_end_idx)
        xs.push_back(idx + offset);
      box.any = true;
    }
    return true;
  }

  // DI-engine's `merge`: increments add up on non-collectors, everything
  // else overwrites.
  void merge(context& ctx) {
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

  step wait_for_context(caf::timespan timeout) {
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

  step before(context& ctx) {
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

  step before_context(context& ctx) {
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
  void after(context& ctx) {
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
};

} // namespace

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
      // no learner ever heard from (none in the cluster), nobody will ack.
      svc.quit_when([st] {
        return st->delivery.nothing_unacked() || !st->delivery.acked_any();
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
