#include "dice/exchangers/context_exchanger.hpp"

#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/storage/context_spool.hpp"
#include "dice/security/trust.hpp"

#include "caf/make_message.hpp"
#include "caf/send.hpp"

#include "applied_deltas.hpp"
#include "loader_bridge.hpp"

#include <deque>
#include <map>
#include <memory>
#include <set>

namespace dice {

std::string context_topic(role r) {
  return std::string{"context_exchanger_"} + to_string(r);
}

std::string context_ack_topic(std::uint32_t collector) {
  return "context_ack_" + std::to_string(collector);
}

namespace {

// DI-engine's `_state`: what arrived since the last merge. The role actor is
// single-threaded, so unlike DI-engine nothing can arrive between reading
// and resetting it.
struct inbox {
  bool any = false;
  std::optional<std::int64_t> env_step;
  std::optional<std::int64_t> env_episode;
  std::optional<std::int64_t> train_iter;
  std::optional<std::vector<payload>> trajectories;
  std::optional<std::vector<payload>> episodes;
  std::optional<std::vector<std::int64_t>> trajectory_end_idx;
};

struct exchanger_state {
  context_exchanger_options opts;
  node_services* svc = nullptr;
  role_set roles;
  bool active = false;
  inbox box;
  // What a collector sent last, to compute increments (DI-engine's
  // `_local_state`).
  std::int64_t sent_env_step = 0;
  std::int64_t sent_env_episode = 0;
  std::uint64_t seq = 0;
  detail::role_handles handles;
  std::shared_ptr<context_exchange_stats> stats;

  // -- receiver: exactly-once -------------------------------------------------

  using sender_key = detail::applied_deltas::key;

  detail::applied_deltas applied;

  // The latest incarnation of each collector (a learner group's watermarks).
  std::map<std::uint32_t, std::uint64_t> last_incarnation;

  // Senders whose deltas were applied since the last merge (acked then).
  std::set<sender_key> to_ack;

  // Deltas and payload bytes in `box` (the learner's bounded buffer).
  std::size_t box_deltas = 0;
  std::size_t box_bytes = 0;

  // Deltas refused as inconsistent (logged every 1024th time).
  std::uint64_t malformed = 0;

  static std::size_t bytes_of(const context_delta& d) {
    std::size_t n = 0;
    for (auto& x : d.trajectories)
      n += x.bytes.size();
    for (auto& x : d.episodes)
      n += x.bytes.size();
    return n;
  }

  static bool add(std::int64_t x, std::int64_t y, std::int64_t& out) {
    return !__builtin_add_overflow(x, y, &out);
  }

  // Why `d` (from the wire) cannot be applied, or nullptr. Checked before
  // anything changes: every sum below is computed again by put() and cannot
  // overflow once this passed.
  const char* why_invalid(const context_delta& d) const {
    if (auto why = sequence_error(d))
      return why;
    // No list can hold more items than it has bytes (what unpack checks
    // too), so item counts and offsets stay within memory sizes.
    for (auto* xs : {&d.trajectories, &d.episodes})
      for (auto& x : *xs)
        if (x.count > x.bytes.size())
          return "a payload claims more items than bytes";
    std::int64_t sum = 0;
    if (d.env_step && !add(box.env_step.value_or(0), *d.env_step, sum))
      return "env_step increment overflows";
    if (d.env_episode && !add(box.env_episode.value_or(0), *d.env_episode, sum))
      return "env_episode increment overflows";
    auto offset = static_cast<std::int64_t>(
      box.trajectories ? item_count(*box.trajectories) : 0);
    for (auto idx : d.trajectory_end_idx)
      if (!add(idx, offset, sum))
        return "trajectory_end_idx overflows";
    return nullptr;
  }

  // A learner's buffer is full: refusing leaves the delta unapplied and
  // unacked, so its sender resends it once the learner caught up.
  bool buffer_full(std::size_t incoming) const {
    if (box_deltas == 0)
      return false;
    return (opts.max_buffered > 0 && box_deltas >= opts.max_buffered)
      || (opts.max_buffered_bytes > 0
          && box_bytes + incoming > opts.max_buffered_bytes);
  }

  // Cumulative ack: every seq up to `upto` of (sender, incarnation) is settled.
  void send_ack(const sender_key& key) {
    auto upto = applied.upto(key);
    if (upto == 0)
      return;
    context_delta ack;
    ack.sender = svc->node_id();
    ack.incarnation = key.second;
    ack.seq = upto;
    ack.base = upto;
    ack.sender_roles = roles;
    auto topic = context_ack_topic(key.first);
    svc->publish(topic, caf::make_message(topic, std::move(ack)));
    ++stats->acks_sent;
  }

  static void raise_peak(std::atomic<std::uint64_t>& peak, std::uint64_t x) {
    auto cur = peak.load();
    while (x > cur && !peak.compare_exchange_weak(cur, x)) {
      // retry: another exchanger raised it meanwhile
    }
  }

  // -- sender: acks, resend, window ------------------------------------------

  struct unacked_delta {
    context_delta delta;
    caf::actor_clock::time_point sent_at;
    // Recovered from the spool and not republished yet.
    bool unsent = false;
  };

  // Deltas the learner has not acknowledged yet, oldest first.
  std::deque<unacked_delta> unacked;
  // The spool (null: none): every delta of `unacked` is in it, written
  // before it was published.
  std::unique_ptr<context_spool> spool;
  // Unacknowledged deltas earlier incarnations of this node left in the
  // spool, by their incarnation: resent like `unacked` until acknowledged.
  std::map<std::uint64_t, std::deque<unacked_delta>> recovered;
  // The recovered deltas went out once (on the first iteration).
  bool republished = false;
  // A resend timer is scheduled.
  bool resend_armed = false;
  // A learner acknowledged something of this incarnation (someone listens).
  bool acked_any = false;
  // When the current window wait began.
  caf::actor_clock::time_point wait_started;

  // Collectors track acks unless DI-engine's fire-and-forget was asked for.
  // With a storage loader a resend stores the delta again (a fresh
  // reference, so a learner never depends on an expired one).
  bool tracking() const {
    return active && opts.max_in_flight > 0 && has(role::collector);
  }

  // The lowest seq still unacknowledged (or `next` when none is): what a
  // delta sent now carries as its base.
  std::uint64_t lowest_unacked(std::uint64_t next) const {
    return unacked.empty() ? next : unacked.front().delta.seq;
  }

  void publish_delta(const context_delta& d) {
    for (auto r : all_roles) {
      if (!has(r))
        continue;
      auto topic = context_topic(r);
      svc->publish(topic, caf::make_message(topic, d));
    }
  }

  // Publishes `d`, through the storage loader if there is one: DI-engine's
  // `storage_loader.save(payload)`, off this actor; the loader stores the
  // delta and publishes the reference per topic. The role actor flushes the
  // loader before it sends its finish, so a reference published here
  // always precedes this node's finish.
  void emit(const context_delta& d) {
    if (opts.storage_loader && handles.router && has(role::collector)) {
      std::vector<std::string> topics;
      for (auto r : all_roles)
        if (has(r))
          topics.push_back(context_topic(r));
      caf::send_as(handles.self, opts.storage_loader, save_atom::value, d,
                   handles.router, std::move(topics));
      return;
    }
    publish_delta(d);
  }

  void resend(unacked_delta& x, caf::actor_clock::time_point now) {
    log::debug(svc->node_id(), "resending unacked delta {}", x.delta.seq);
    x.delta.base = lowest_unacked(x.delta.seq);
    emit(x.delta);
    x.sent_at = now;
    ++stats->deltas_resent;
  }

  // A delta of an earlier incarnation goes out as it was spooled: its own
  // incarnation and seq (the learner's dedup of that stream drops what it
  // applied before the kill), with the lowest seq still held as its base.
  void resend_recovered(std::deque<unacked_delta>& xs, unacked_delta& x,
                        caf::actor_clock::time_point now) {
    x.delta.base = xs.front().delta.seq;
    emit(x.delta);
    x.sent_at = now;
    x.unsent = false;
    ++stats->deltas_resent;
  }

  bool nothing_unacked() const {
    return unacked.empty() && recovered.empty();
  }

  // -- spool
  // -------------------------------------------------------------------

  // Takes over what earlier incarnations of this node left in `dir`.
  void open_spool(const std::string& dir, bool fsync) {
    if (spool) {
      // This middleware runs again after an in-process restart: the last
      // incarnation's deltas are read back from its files below.
      spool.reset();
      unacked.clear();
      recovered.clear();
    }
    context_spool_options so;
    so.dir = dir;
    so.node = svc->node_id();
    so.incarnation = svc->incarnation();
    so.fsync = fsync;
    auto opened = context_spool::open(so);
    if (!opened) {
      ++stats->spool_errors;
      log::error(svc->node_id(),
                 "no spool: " + render(opened.error())
                   + "; a kill loses unacknowledged deltas");
      return;
    }
    spool = std::move(*opened);
    republished = false;
    for (auto& inc : spool->take_recovered()) {
      auto& xs = recovered[inc.incarnation];
      for (auto& d : inc.deltas) {
        // One line per delta: tests add up what a killed incarnation
        // spooled but never reported.
        log::info(svc->node_id(),
                  "spool: recovered delta " + std::to_string(d.seq)
                    + " of incarnation " + std::to_string(inc.incarnation)
                    + " (env_step +" + std::to_string(d.env_step.value_or(0))
                    + ")");
        ++stats->deltas_recovered;
        xs.push_back(unacked_delta{std::move(d), {}, true});
      }
    }
  }

  void spool_failed(const caf::error& err) {
    ++stats->spool_errors;
    log::error(svc->node_id(),
               "spool write failed, going on without it (a kill now loses "
               "unacknowledged deltas): "
                 + render(err));
    spool.reset();
  }

  // Every seq of this incarnation below the lowest unacked one is settled
  // (acknowledged or given up): the spool may forget it.
  void spool_settled() {
    if (!spool)
      return;
    if (auto err = spool->settle(svc->incarnation(), lowest_unacked(seq + 1) - 1))
      spool_failed(err);
  }

  // The first iteration of a new incarnation: what its predecessors left
  // unacknowledged goes out now (and again on the resend timer or when a
  // learner connects, like this incarnation's own deltas).
  void republish() {
    republished = true;
    auto now = svc->now();
    for (auto& kvp : recovered)
      for (auto& x : kvp.second)
        if (x.unsent)
          resend_recovered(kvp.second, x, now);
    arm_resend();
  }

  // The run is over (or this incarnation stops): files whose deltas were
  // all acknowledged go; so do the rest once the run finished normally
  // (nobody would acknowledge them any more). A node that failed keeps
  // them for its next incarnation.
  void close_spool() {
    if (!spool)
      return;
    std::size_t left = unacked.size();
    for (auto& kvp : recovered)
      left += kvp.second.size();
    if (left > 0 && svc->report().failed) {
      log::warning(svc->node_id(),
                   "spool: keeping " + std::to_string(left)
                     + " unacknowledged deltas for the next incarnation");
      spool.reset();
      return;
    }
    if (left > 0)
      log::warning(svc->node_id(),
                   "spool: the run is over and no learner acknowledged "
                     + std::to_string(left) + " deltas; removing them");
    spool->remove_all();
    spool.reset();
  }

  // The timer runs on the role actor's clock (fake in tests) and fires
  // while the collector waits for anything.
  void arm_resend() {
    if (resend_armed || nothing_unacked())
      return;
    resend_armed = true;
    svc->schedule(opts.resend_timeout, [this] {
      on_resend_timer();
    });
  }

  void on_resend_timer() {
    resend_armed = false;
    auto now = svc->now();
    for (auto& x : unacked)
      if (now - x.sent_at >= opts.resend_timeout)
        resend(x, now);
    for (auto& kvp : recovered)
      for (auto& x : kvp.second)
        if (now - x.sent_at >= opts.resend_timeout)
          resend_recovered(kvp.second, x, now);
    arm_resend();
  }

  // A learner (re)connected: whatever it has not acknowledged may have gone
  // into a dead connection. Resend it now instead of waiting out the timer
  // (a learner drops what it already has).
  void on_peer(const peer_event& ev) {
    if (!ev.up || !ev.roles.has(role::learner) || nothing_unacked())
      return;
    auto n = unacked.size();
    for (auto& kvp : recovered)
      n += kvp.second.size();
    log::info(svc->node_id(),
              "learner node " + std::to_string(ev.node)
                + " connected: resending " + std::to_string(n)
                + " unacknowledged deltas");
    auto now = svc->now();
    for (auto& x : unacked) {
      resend(x, now);
      ++stats->deltas_resent_on_connect;
    }
    for (auto& kvp : recovered)
      for (auto& x : kvp.second) {
        resend_recovered(kvp.second, x, now);
        ++stats->deltas_resent_on_connect;
      }
  }

  // An ack for an earlier incarnation's deltas this one republished.
  void on_recovered_ack(const context_delta& ack) {
    auto i = recovered.find(ack.incarnation);
    if (i == recovered.end())
      return;
    acked_any = true;
    auto& xs = i->second;
    bool freed = false;
    while (!xs.empty() && xs.front().delta.seq <= ack.seq) {
      xs.pop_front();
      freed = true;
    }
    if (!freed)
      return;
    ++stats->acks_received;
    if (spool)
      if (auto err = spool->settle(ack.incarnation, ack.seq))
        spool_failed(err);
    if (xs.empty()) {
      log::info(svc->node_id(),
                "spool: the learner acknowledged every "
                "republished delta of incarnation "
                  + std::to_string(ack.incarnation));
      recovered.erase(i);
    }
  }

  void on_ack(const context_delta& ack) {
    // An ack for an older incarnation of this node matters only for the
    // deltas of it this one republished from the spool.
    if (ack.incarnation != svc->incarnation())
      return on_recovered_ack(ack);
    acked_any = true;
    bool freed = false;
    while (!unacked.empty() && unacked.front().delta.seq <= ack.seq) {
      unacked.pop_front();
      freed = true;
    }
    if (freed) {
      ++stats->acks_received;
      spool_settled();
    }
  }

  bool window_full() const {
    return tracking() && unacked.size() >= opts.max_in_flight
      && !svc->finished();
  }

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

  void ack_merged() {
    for (auto& key : to_ack)
      send_ack(key);
    to_ack.clear();
  }

  // DI-engine's `put`: each field goes to the roles the spec table names.
  void put(const context_delta& d) {
    if (not_owned(d)) {
      ++stats->deltas_not_owned;
      return;
    }
    if (auto why = why_invalid(d))
      return refuse_malformed(d, why);
    auto contact = applied.note(d);
    if (contact.first && contact.base > 1 && has(role::learner))
      log::info(svc->node_id(),
                "first delta from node " + std::to_string(d.sender) + " (incarnation "
                  + std::to_string(d.incarnation) + ") is seq "
                  + std::to_string(d.seq) + ": its stream starts at seq "
                  + std::to_string(contact.base) + "; deltas 1.."
                  + std::to_string(contact.base - 1)
                  + " were acknowledged by an earlier learner or given up");
    if (applied.duplicate(d)) {
      count(trust_event::duplicate_dropped);
      log::debug(svc->node_id(), "dropped duplicate delta {} from node {}",
                 d.seq, d.sender);
      // The sender resent it, so our ack may have been lost: ack again.
      if (has(role::learner))
        send_ack({d.sender, d.incarnation});
      return;
    }
    auto bytes = bytes_of(d);
    // While finishing, iterations are over and senders will not resend:
    // take what still arrives (their windows bound it).
    if (has(role::learner) && !svc->finished() && buffer_full(bytes)) {
      ++stats->deltas_refused;
      log::debug(svc->node_id(), "buffer full: refused delta {} from node {}",
                 d.seq, d.sender);
      return;
    }
    applied.mark(d);
    // The stream a collector sends new deltas on is its current one; a
    // resend (a restarted collector republishing its predecessor's deltas
    // from the spool, say) that is only a duplicate does not move it back.
    if (d.sender_roles.has(role::collector))
      last_incarnation[d.sender] = d.incarnation;
    // While finishing, ack at once instead of at the next merge: the last
    // iteration may already be over (on_stop merges), and the sender holds
    // its quit (and its stored files) until it heard.
    if (has(role::learner) && d.seq != 0 && svc->finished())
      send_ack({d.sender, d.incarnation});
    if (has(role::learner) && d.seq != 0) {
      to_ack.emplace(d.sender, d.incarnation);
      ++box_deltas;
      box_bytes += bytes;
      raise_peak(stats->buffered_peak, box_deltas);
      raise_peak(stats->buffered_bytes_peak, box_bytes);
    }
    ++svc->report().deltas_received;
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
      return;
    // Offsets keep each sender's trajectory_end_idx pointing into the merged
    // list (DI-engine extends them unchanged, which breaks GAE with several
    // collectors).
    auto offset = static_cast<std::int64_t>(
      box.trajectories ? item_count(*box.trajectories) : 0);
    if (!d.trajectories.empty()) {
      auto& xs = box.trajectories ? *box.trajectories
                                  : box.trajectories.emplace();
      xs.insert(xs.end(), d.trajectories.begin(), d.trajectories.end());
      svc->report().trajectories_received += static_cast<std::int64_t>(
        item_count(d.trajectories));
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
  }

  // Adds `x` to a context counter; a sum past the int64 range (only hostile
  // or corrupt increments get there) leaves the counter as it was.
  void add_to(std::int64_t& counter, std::int64_t x, const char* what) {
    std::int64_t sum = 0;
    if (add(counter, x, sum)) {
      counter = sum;
      return;
    }
    count(trust_event::message_rejected);
    log::error(svc->node_id(),
               std::string{"dropped an "} + what
                 + " increment that would overflow");
  }

  // DI-engine's `merge`: increments add up on non-collectors, everything
  // else overwrites.
  void merge(context& ctx) {
    if (box.env_step)
      add_to(ctx.env_step, *box.env_step, "env_step");
    if (box.env_episode)
      add_to(ctx.env_episode, *box.env_episode, "env_episode");
    if (box.train_iter)
      ctx.train_iter = *box.train_iter;
    if (box.trajectories)
      ctx.trajectories = std::move(*box.trajectories);
    if (box.episodes)
      ctx.episodes = std::move(*box.episodes);
    if (box.trajectory_end_idx)
      ctx.trajectory_end_idx = std::move(*box.trajectory_end_idx);
    box = inbox{};
    box_deltas = 0;
    box_bytes = 0;
    // Acks go out once the data is in the context, so a collector's window
    // also bounds what waits here (learner backpressure); in a group, once
    // the group counted it (context_partition::ack_now).
    if (!opts.partition || !opts.partition->defer_acks)
      ack_merged();
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
    if (!republished && !recovered.empty())
      republish();
    if (window_full()) {
      // Backpressure: produce nothing more until the learner caught up.
      ++stats->window_waits;
      wait_started = svc->now();
      return wait_for{
        [this] {
          return !window_full();
        },
        opts.window_timeout,
        [this](context& ctx, wait_outcome outcome) -> step {
          stats->window_wait_ns += std::chrono::duration_cast<
                                     std::chrono::nanoseconds>(svc->now()
                                                               - wait_started)
                                     .count();
          if (outcome == wait_outcome::timed_out && !unacked.empty()) {
            log::warning(svc->node_id(),
                         "no ack within the window timeout; "
                         "giving up on resending delta "
                           + std::to_string(unacked.front().delta.seq));
            unacked.pop_front();
            ++stats->deltas_evicted;
            spool_settled();
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
    d.seq = ++seq;
    d.sender_roles = roles;
    d.model_version = ctx.model_version;
    if (has(role::collector))
      ++stats->deltas_sent;
    if (!tracking()) {
      d.base = d.seq;
      emit(d);
      return;
    }
    // Bounded even when finishing or after a timed-out window wait: the
    // oldest delta is given up (no longer resent), and the base of what
    // goes out next tells receivers to stop waiting for it.
    if (unacked.size() >= opts.max_in_flight) {
      unacked.pop_front();
      ++stats->deltas_evicted;
      spool_settled();
    }
    d.base = lowest_unacked(d.seq);
    // Spooled before it goes out: once the router has it, a kill can no
    // longer lose it.
    if (spool) {
      if (auto err = spool->append(d))
        spool_failed(err);
      else
        ++stats->deltas_spooled;
    }
    emit(d);
    auto now = svc->now();
    if (svc->finished()) {
      // The last delta: no timer will resend anything after the drain, so
      // resend now whatever is unacked (a learner drops duplicates and
      // refuses nothing while finishing).
      for (auto& x : unacked)
        resend(x, now);
      for (auto& kvp : recovered)
        for (auto& x : kvp.second)
          resend_recovered(kvp.second, x, now);
    }
    unacked.push_back(unacked_delta{std::move(d), now});
    raise_peak(stats->unacked_peak, unacked.size());
    arm_resend();
  }
};

} // namespace

middleware context_exchanger(context_exchanger_options opts) {
  auto st = std::make_shared<exchanger_state>();
  st->opts = opts;
  st->stats = opts.stats ? opts.stats
                         : std::make_shared<context_exchange_stats>();
  middleware result;
  result.name = "context_exchanger";
  result.attach = [st](node_services& svc) {
    st->svc = &svc;
    st->roles = svc.roles();
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
    st->handles = detail::handles_of(svc);
    if (auto& p = st->opts.partition) {
      std::weak_ptr<exchanger_state> weak = st;
      p->ack_now = [weak] {
        if (auto s = weak.lock())
          s->ack_merged();
      };
      p->watermark = [weak](std::uint32_t c) {
        std::pair<std::uint64_t, std::uint64_t> result{0, 0};
        if (auto s = weak.lock()) {
          auto i = s->last_incarnation.find(c);
          if (i != s->last_incarnation.end())
            result = {i->second, s->applied.upto({c, i->second})};
        }
        return result;
      };
      p->settle = [weak](std::uint32_t c, std::uint64_t incarnation,
                         std::uint64_t upto) {
        if (auto s = weak.lock()) {
          s->applied.settle({c, incarnation}, upto);
          s->last_incarnation[c] = incarnation;
        }
      };
    }
    if (st->opts.storage_loader)
      svc.flush_before_done(
        caf::actor_cast<caf::actor>(st->opts.storage_loader));
    // Subscribe to every role this node does not have.
    for (auto r : all_roles) {
      if (st->has(r))
        continue;
      svc.subscribe(context_topic(r), [st](const caf::type_erased_tuple& msg) {
        if (msg.match_elements<std::string, context_delta>())
          st->put(msg.get_as<context_delta>(1));
        else
          detail::forward_storage_ref(*st->svc, st->opts.storage_loader,
                                      st->handles.self, msg);
      });
    }
    if (st->tracking()) {
      auto dir = st->opts.spool_dir.empty() ? svc.spool_dir()
                                            : st->opts.spool_dir;
      if (!dir.empty() && dir != "-")
        st->open_spool(dir, st->opts.spool_fsync || svc.spool_fsync());
      svc.subscribe(context_ack_topic(svc.node_id()),
                    [st](const caf::type_erased_tuple& msg) {
                      if (msg.match_elements<std::string, context_delta>())
                        st->on_ack(msg.get_as<context_delta>(1));
                      else
                        count(trust_event::message_rejected);
                    });
      svc.on_peer_event([st](const peer_event& ev) {
        st->on_peer(ev);
      });
      // Exactly-once to the end: the node stays (bounded by its drain
      // timeout, resending meanwhile) until a learner acknowledged its last
      // deltas; with a storage loader, the files stay that long too. With
      // no learner ever heard from (none in the cluster), nobody will ack.
      svc.quit_when([st] {
        return st->nothing_unacked() || !st->acked_any;
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
      st->ack_merged();
    st->close_spool();
    if (st->active) {
      auto& x = *st->stats;
      log::info(st->svc->node_id(),
                "context exchange: sent " + std::to_string(x.deltas_sent)
                  + ", resent " + std::to_string(x.deltas_resent) + " ("
                  + std::to_string(x.deltas_resent_on_connect)
                  + " on reconnect)" + ", spooled "
                  + std::to_string(x.deltas_spooled) + ", recovered "
                  + std::to_string(x.deltas_recovered) + ", unacked at stop "
                  + std::to_string(st->unacked.size()) + ", window waits "
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
