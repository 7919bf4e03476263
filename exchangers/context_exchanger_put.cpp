// The context exchanger's receiving side: DI-engine's `put` (each field to
// the roles the spec table names), with dice's checks before it: ownership in
// a learner group, validity, duplicates, the group's in-order rule and the
// learner's buffer cap.

#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "context_exchanger_state.hpp"

namespace dice::detail {

void context_exchanger_state::refuse_malformed(const context_delta& d,
                                               const char* why) {
  count(trust_event::message_rejected);
  if (++malformed % 1024 == 1)
    log::warning(svc->node_id(),
                 "refused a delta from node " + std::to_string(d.sender) + ": "
                   + why);
}

// A learner of a group leaves other learners' collectors alone: no
// apply, no ack, no record (their owner may change to this learner later,
// whose stream then starts at the collector's lowest unacked delta).
bool context_exchanger_state::not_owned(const context_delta& d) const {
  auto* p = opts.partition.get();
  return p != nullptr && p->owns && has(role::learner)
    && d.sender_roles.has(role::collector) && !p->owns(d.sender);
}

// DI-engine's `put`: each field goes to the roles the spec table names.
void context_exchanger_state::put(const context_delta& d) {
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
                + " (incarnation " + std::to_string(d.incarnation) + ") is seq "
                + std::to_string(d.seq) + ": its stream starts at seq "
                + std::to_string(contact.base) + "; deltas 1.."
                + std::to_string(contact.base - 1)
                + " were acknowledged by an earlier learner or given up");
  if (applied.duplicate(d)) {
    count(trust_event::duplicate_dropped);
    log::debug(svc->node_id(), "dropped duplicate delta {} from node {}", d.seq,
               d.sender);
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
bool context_exchanger_state::in_order_only() const {
  return has(role::learner) && opts.partition && opts.partition->defer_acks;
}

void context_exchanger_state::hold(const context_delta& d) {
  switch (early.hold(d)) {
    case early_deltas::outcome::duplicate:
      count(trust_event::duplicate_dropped);
      break;
    case early_deltas::outcome::full: ++stats->deltas_refused; break;
    case early_deltas::outcome::held:
      ++stats->deltas_past_gap;
      log::debug(svc->node_id(), "holding delta {} from node {}: {} is missing",
                 d.seq, d.sender,
                 delivery.applied.upto({d.sender, d.incarnation}) + 1);
      break;
  }
  delivery.reack({d.sender, d.incarnation});
}

// Applies what was held for `key` now that the gap before it filled.
void context_exchanger_state::drain_held(
  const context_delivery::sender_key& key) {
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
bool context_exchanger_state::apply(const context_delta& d) {
  auto& applied = delivery.applied;
  auto bytes = context_inbox::bytes_of(d);
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
  box.merged.push_back({d.sender, d.incarnation, d.seq, d.model_version});
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

} // namespace dice::detail
