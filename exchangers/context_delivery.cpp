#include "context_delivery.hpp"

#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "loader_bridge.hpp"

#include <algorithm>
#include <optional>

namespace dice::detail {

// -- receiver -----------------------------------------------------------------

bool context_delivery::buffer_full(std::size_t incoming) const {
  if (box_deltas_ == 0)
    return false;
  return (opts_.max_buffered > 0 && box_deltas_ >= opts_.max_buffered)
    || (opts_.max_buffered_bytes > 0
        && box_bytes_ + incoming > opts_.max_buffered_bytes);
}

void context_delivery::buffered(const context_delta& d, std::size_t bytes) {
  to_ack_.emplace(d.sender, d.incarnation);
  ++box_deltas_;
  box_bytes_ += bytes;
  raise_peak(stats_->buffered_peak, box_deltas_);
  raise_peak(stats_->buffered_bytes_peak, box_bytes_);
}

void context_delivery::raise_acked(const sender_key& key, std::uint64_t upto) {
  auto i = acked_.find(key);
  if (i == acked_.end()) {
    if (acked_.size() >= applied_deltas::max_streams)
      acked_.erase(acked_.begin());
    acked_.emplace(key, upto);
  } else if (upto > i->second) {
    i->second = upto;
  }
}

void context_delivery::settle(const sender_key& key, std::uint64_t upto) {
  applied.settle(key, upto);
  raise_acked(key, upto);
}

void context_delivery::reack(const sender_key& key) {
  auto i = acked_.find(key);
  if (i == acked_.end())
    return;
  send_upto(key, std::min(i->second, applied.upto(key)));
}

void context_delivery::send_ack(const sender_key& key) {
  auto upto = applied.upto(key);
  raise_acked(key, upto);
  send_upto(key, upto);
}

void context_delivery::send_upto(const sender_key& key, std::uint64_t upto) {
  if (upto == 0)
    return;
  context_ack ack;
  ack.sender = svc_->node_id();
  ack.collector = key.first;
  ack.incarnation = key.second;
  ack.upto = upto;
  svc_->emit(topic<context_ack>{context_ack_topic(key.first)}, ack);
  ++stats_->acks_sent;
  log::debug(svc_->node_id(), "ack to node {} (incarnation {}) up to {}",
             key.first, key.second, upto);
}

void context_delivery::ack_merged() {
  for (auto& key : to_ack_)
    send_ack(key);
  to_ack_.clear();
}

// -- sender: publishing -------------------------------------------------------

void context_delivery::publish_delta(const context_delta& d) {
  for (auto r : all_roles)
    if (roles_.has(r))
      svc_->emit(topic<context_delta>{context_topic(r)}, d);
}

// Through the storage loader if there is one: DI-engine's
// `storage_loader.save(payload)`, off this actor; the loader stores the
// delta and publishes the reference per topic. The role actor flushes the
// loader before it sends its finish, so a reference published here always
// precedes this node's finish.
void context_delivery::emit(const context_delta& d) {
  if (opts_.storage_loader && roles_.has(role::collector)) {
    std::vector<std::string> topics;
    for (auto r : all_roles)
      if (roles_.has(r))
        topics.push_back(context_topic(r));
    svc_->store(opts_.storage_loader, d, std::move(topics));
    return;
  }
  publish_delta(d);
}

void context_delivery::send_tracked(context_delta d) {
  // Bounded after a timed-out window wait: the oldest delta is given up (no
  // longer resent), and the base of what goes out next tells receivers to
  // stop waiting for it.
  // Not while finishing: the last iteration's delta may then exceed the
  // window by one. Its window wait ended with the finish, not with an ack,
  // and the learner, finishing too, takes everything: evicting here gave
  // up data it was about to count (LearnerGroupRun's kill test lost a
  // 64-step delta so).
  if (unacked_.size() >= opts_.max_in_flight && !svc_->finished())
    evict_oldest();
  d.base = lowest_unacked(d.seq);
  // Spooled before it goes out: once the router has it, a kill can no
  // longer lose it.
  if (spool_) {
    if (auto err = spool_->append(d))
      spool_failed(err);
    else
      ++stats_->deltas_spooled;
  }
  emit(d);
  auto now = svc_->now();
  if (svc_->finished()) {
    // The last delta: no timer will resend anything after the drain, so
    // resend now whatever is unacked (a learner drops duplicates and
    // refuses nothing while finishing).
    for (auto& x : unacked_)
      resend(x, now);
    for (auto& kvp : recovered_)
      for (auto& x : kvp.second)
        resend_recovered(kvp.second, x, now);
  }
  unacked_.push_back(unacked_delta{std::move(d), now});
  raise_peak(stats_->unacked_peak, unacked_.size());
  arm_resend();
}

void context_delivery::evict_oldest() {
  if (unacked_.empty())
    return;
  unacked_.pop_front();
  ++stats_->deltas_evicted;
  spool_settled();
}

void context_delivery::resend(unacked_delta& x,
                              caf::actor_clock::time_point now) {
  log::debug(svc_->node_id(), "resending unacked delta {}", x.delta.seq);
  x.delta.base = lowest_unacked(x.delta.seq);
  emit(x.delta);
  x.sent_at = now;
  ++stats_->deltas_resent;
}

// A delta of an earlier incarnation goes out as it was spooled: its own
// incarnation and seq (the learner's dedup of that stream drops what it
// applied before the kill), with the lowest seq still held as its base.
void context_delivery::resend_recovered(std::deque<unacked_delta>& xs,
                                        unacked_delta& x,
                                        caf::actor_clock::time_point now) {
  x.delta.base = xs.front().delta.seq;
  emit(x.delta);
  x.sent_at = now;
  x.unsent = false;
  ++stats_->deltas_resent;
}

// -- sender: resend -----------------------------------------------------------

// The timer runs on the role actor's clock (fake in tests) and fires while
// the collector waits for anything.
// Armed for the oldest delta's deadline, not a fixed period after the last
// firing: with a period, a delta sent just after a firing waited almost two
// timeouts (seen: a collector whose learner died stalled 10 s, not 5).
void context_delivery::arm_resend() {
  if (resend_armed_ || nothing_unacked())
    return;
  std::optional<caf::actor_clock::time_point> first;
  auto consider = [&first](const unacked_delta& x) {
    if (!x.unsent && (!first || x.sent_at < *first))
      first = x.sent_at;
  };
  for (auto& x : unacked_)
    consider(x);
  for (auto& kvp : recovered_)
    for (auto& x : kvp.second)
      consider(x);
  if (!first)
    return; // only unpublished spool deltas: republish_recovered arms
  auto delay = std::max(caf::timespan{0},
                        *first + opts_.resend_timeout - svc_->now());
  resend_armed_ = true;
  svc_->schedule(delay, [this] {
    on_resend_timer();
  });
}

void context_delivery::on_resend_timer() {
  resend_armed_ = false;
  auto now = svc_->now();
  for (auto& x : unacked_)
    if (now - x.sent_at >= opts_.resend_timeout)
      resend(x, now);
  for (auto& kvp : recovered_)
    for (auto& x : kvp.second)
      if (now - x.sent_at >= opts_.resend_timeout)
        resend_recovered(kvp.second, x, now);
  arm_resend();
}

// Whatever a (re)connected learner has not acknowledged may have gone into a
// dead connection: resent now instead of waiting out the timer (a learner
// drops what it already has).
void context_delivery::on_peer(const peer_event& ev) {
  if (!ev.roles.has(role::learner))
    return;
  if (ev.up) {
    ++learners_[ev.node];
    knew_learner_ = true;
  } else if (auto i = learners_.find(ev.node);
             i != learners_.end() && --i->second <= 0) {
    learners_.erase(i);
  }
  if (!ev.up || nothing_unacked())
    return;
  auto n = unacked_.size();
  for (auto& kvp : recovered_)
    n += kvp.second.size();
  log::info(svc_->node_id(),
            "learner node " + std::to_string(ev.node) + " connected: resending "
              + std::to_string(n) + " unacknowledged deltas");
  auto now = svc_->now();
  for (auto& x : unacked_) {
    resend(x, now);
    ++stats_->deltas_resent_on_connect;
  }
  for (auto& kvp : recovered_)
    for (auto& x : kvp.second) {
      resend_recovered(kvp.second, x, now);
      ++stats_->deltas_resent_on_connect;
    }
}

// close_spool (called after this) keeps them for the next incarnation only
// if the node is failing; a run that ends removes the spool, and without
// one they are gone with the process: said here, with the reason.
void context_delivery::report_abandoned() {
  auto n = unacked_.size();
  for (auto& kvp : recovered_)
    n += kvp.second.size();
  if (n == 0)
    return;
  stats_->deltas_abandoned += n;
  auto fate = spool_ && svc_->failing() ? "kept in the spool" : "lost";
  log::warning(svc_->node_id(),
               "every learner is gone: stopping without waiting for the "
               "acknowledgement of "
                 + std::to_string(n) + " deltas (" + fate + ")");
}

// -- sender: acks -------------------------------------------------------------

void context_delivery::on_ack(const context_ack& ack) {
  // An ack for another collector, or for seqs this incarnation never sent,
  // frees nothing: only a confused or forging sender sends one.
  if (ack.collector != svc_->node_id()
      || (ack.incarnation == svc_->incarnation() && ack.upto > seq_)) {
    count(trust_event::message_rejected);
    log::warning(svc_->node_id(),
                 "refused an ack from node " + std::to_string(ack.sender)
                   + " for node " + std::to_string(ack.collector) + " up to "
                   + std::to_string(ack.upto));
    return;
  }
  // An ack for an older incarnation of this node matters only for the
  // deltas of it this one republished from the spool.
  if (ack.incarnation != svc_->incarnation())
    return on_recovered_ack(ack);
  acked_any_ = true;
  bool freed = false;
  while (!unacked_.empty() && unacked_.front().delta.seq <= ack.upto) {
    unacked_.pop_front();
    freed = true;
  }
  if (freed) {
    ++stats_->acks_received;
    spool_settled();
    return;
  }
  fast_resend(ack);
}

// An ack that frees nothing and stops just below the oldest unacked delta:
// the learner took later deltas but lacks that one (say, the learner that
// took over from a dead one settled the stream up to what its group counted,
// and the dead one never got the next delta). Resend it now, like TCP's
// fast retransmit, instead of after the resend timeout: once per delta,
// and only once it had a quarter of the timeout to arrive (an ack crossing
// a fresh delta on the wire is no sign of loss).
void context_delivery::fast_resend(const context_ack& ack) {
  if (unacked_.empty())
    return;
  auto& x = unacked_.front();
  if (ack.upto + 1 != x.delta.seq || x.delta.seq <= fast_resent_)
    return;
  auto now = svc_->now();
  if (now - x.sent_at < opts_.resend_timeout / 4)
    return;
  fast_resent_ = x.delta.seq;
  ++stats_->deltas_fast_resent;
  resend(x, now);
}

void context_delivery::on_recovered_ack(const context_ack& ack) {
  auto i = recovered_.find(ack.incarnation);
  if (i == recovered_.end())
    return;
  acked_any_ = true;
  auto& xs = i->second;
  bool freed = false;
  while (!xs.empty() && xs.front().delta.seq <= ack.upto) {
    xs.pop_front();
    freed = true;
  }
  if (!freed)
    return;
  ++stats_->acks_received;
  if (spool_)
    if (auto err = spool_->settle(ack.incarnation, ack.upto))
      spool_failed(err);
  if (xs.empty()) {
    log::info(svc_->node_id(),
              "spool: the learner acknowledged every republished delta of "
              "incarnation "
                + std::to_string(ack.incarnation));
    recovered_.erase(i);
  }
}

} // namespace dice::detail
