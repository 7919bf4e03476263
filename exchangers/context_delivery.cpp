#include "context_delivery.hpp"

#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "loader_bridge.hpp"

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

void context_delivery::send_ack(const sender_key& key) {
  auto upto = applied.upto(key);
  if (upto == 0)
    return;
  context_ack ack;
  ack.sender = svc_->node_id();
  ack.collector = key.first;
  ack.incarnation = key.second;
  ack.upto = upto;
  svc_->emit(topic<context_ack>{context_ack_topic(key.first)}, ack);
  ++stats_->acks_sent;
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
  // Bounded even when finishing or after a timed-out window wait: the
  // oldest delta is given up (no longer resent), and the base of what
  // goes out next tells receivers to stop waiting for it.
  if (unacked_.size() >= opts_.max_in_flight)
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
void context_delivery::arm_resend() {
  if (resend_armed_ || nothing_unacked())
    return;
  resend_armed_ = true;
  svc_->schedule(opts_.resend_timeout, [this] {
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
  if (!ev.up || !ev.roles.has(role::learner) || nothing_unacked())
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
  }
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

// -- sender: spool ------------------------------------------------------------

void context_delivery::open_spool(const std::string& dir, bool fsync) {
  if (spool_) {
    // This middleware runs again after an in-process restart: the last
    // incarnation's deltas are read back from its files below.
    spool_.reset();
    unacked_.clear();
    recovered_.clear();
  }
  context_spool_options so;
  so.dir = dir;
  so.node = svc_->node_id();
  so.incarnation = svc_->incarnation();
  so.fsync = fsync;
  auto opened = context_spool::open(so);
  if (!opened) {
    ++stats_->spool_errors;
    log::error(svc_->node_id(),
               "no spool: " + render(opened.error())
                 + "; a kill loses unacknowledged deltas");
    return;
  }
  spool_ = std::move(*opened);
  republished_ = false;
  for (auto& inc : spool_->take_recovered()) {
    auto& xs = recovered_[inc.incarnation];
    for (auto& d : inc.deltas) {
      // One line per delta: tests add up what a killed incarnation
      // spooled but never reported.
      log::info(svc_->node_id(),
                "spool: recovered delta " + std::to_string(d.seq)
                  + " of incarnation " + std::to_string(inc.incarnation)
                  + " (env_step +" + std::to_string(d.env_step.value_or(0))
                  + ")");
      ++stats_->deltas_recovered;
      xs.push_back(unacked_delta{std::move(d), {}, true});
    }
  }
}

void context_delivery::spool_failed(const caf::error& err) {
  ++stats_->spool_errors;
  log::error(svc_->node_id(),
             "spool write failed, going on without it (a kill now loses "
             "unacknowledged deltas): "
               + render(err));
  spool_.reset();
}

// Every seq of this incarnation below the lowest unacked one is settled
// (acknowledged or given up): the spool may forget it.
void context_delivery::spool_settled() {
  if (!spool_)
    return;
  if (auto err = spool_->settle(svc_->incarnation(),
                                lowest_unacked(seq_ + 1) - 1))
    spool_failed(err);
}

// The first iteration of a new incarnation: what its predecessors left
// unacknowledged goes out now (and again on the resend timer or when a
// learner connects, like this incarnation's own deltas).
void context_delivery::republish_recovered() {
  if (republished_ || recovered_.empty())
    return;
  republished_ = true;
  auto now = svc_->now();
  for (auto& kvp : recovered_)
    for (auto& x : kvp.second)
      if (x.unsent)
        resend_recovered(kvp.second, x, now);
  arm_resend();
}

// Files whose deltas were all acknowledged go; so do the rest once the run
// finished normally (nobody would acknowledge them any more). A node that
// failed keeps them for its next incarnation.
void context_delivery::close_spool() {
  if (!spool_)
    return;
  std::size_t left = unacked_.size();
  for (auto& kvp : recovered_)
    left += kvp.second.size();
  if (left > 0 && svc_->failing()) {
    log::warning(svc_->node_id(),
                 "spool: keeping " + std::to_string(left)
                   + " unacknowledged deltas for the next incarnation");
    spool_.reset();
    return;
  }
  if (left > 0)
    log::warning(svc_->node_id(),
                 "spool: the run is over and no learner acknowledged "
                   + std::to_string(left) + " deltas; removing them");
  spool_->remove_all();
  spool_.reset();
}

} // namespace dice::detail
