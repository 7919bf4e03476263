#include "context_delivery.hpp"

// The collector's spool (context_delivery's part that outlives a kill): what
// is unacknowledged is written before it goes out, read back by the next
// incarnation, republished, and forgotten once acknowledged.

#include "dice/logging/log.hpp"

namespace dice::detail {

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
  so.key = svc_->spool_key();
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
