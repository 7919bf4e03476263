#pragma once

// Internal: the context exchanger's reliable delivery (dice's addition to
// DI-engine's fire-and-forget ContextExchanger): per-collector sequence
// numbers, a learner's cumulative acks (context_ack), a collector's window of
// unacknowledged deltas, their resend (on a timer and when a learner
// connects), the spool that outlives a kill, and the learner's buffer cap.
// The merge rules themselves are in context_exchanger.cpp.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/pipeline/middleware.hpp"
#include "storage/context_spool.hpp"

#include "applied_deltas.hpp"

#include <deque>
#include <map>
#include <memory>
#include <set>

namespace dice::detail {

/// A learner's and a collector's side of exactly-once context delivery.
class context_delivery {
 public:
  /// Identifies a stream: (sender node, sender incarnation).
  using sender_key = applied_deltas::key;

  context_delivery(const context_exchanger_options& opts,
                   std::shared_ptr<context_exchange_stats> stats)
    : opts_(opts), stats_(std::move(stats)) {
    // nop
  }

  /// Binds to the node (from the middleware's attach).
  void attach(node_services& svc, role_set roles, bool active) {
    svc_ = &svc;
    roles_ = roles;
    active_ = active;
  }

  /// The counters.
  context_exchange_stats& stats() {
    return *stats_;
  }

  // -- receiver (learner)
  // ------------------------------------------------------

  /// Which deltas of each stream were applied.
  applied_deltas applied;

  /// The latest incarnation of each collector (a learner group's watermarks).
  std::map<std::uint32_t, std::uint64_t> last_incarnation;

  /// A learner's buffer is full: refusing leaves the delta unapplied and
  /// unacked, so its sender resends it once the learner caught up.
  bool buffer_full(std::size_t incoming) const;

  /// Counts `d` (of `bytes` payload bytes) into the learner's buffer and
  /// remembers to ack its stream at the next merge.
  void buffered(const context_delta& d, std::size_t bytes);

  /// The buffer was merged into the context.
  void buffer_merged() {
    box_deltas_ = 0;
    box_bytes_ = 0;
  }

  /// Cumulative ack: every seq up to what `applied` settled of `key`.
  void send_ack(const sender_key& key);

  /// Acks `key` again (its sender resent a duplicate, so the ack may have
  /// been lost), up to what was acknowledged before and no further: in a
  /// learner group, what is applied but not yet counted must stay unacked.
  void reack(const sender_key& key);

  /// A learner of a group took `key` over: its group counted it up to
  /// `upto`, which this learner may acknowledge.
  void settle(const sender_key& key, std::uint64_t upto);

  /// Acks every stream applied since the last merge.
  void ack_merged();

  // -- sender (collector)
  // ------------------------------------------------------

  /// Collectors track acks unless DI-engine's fire-and-forget was asked for.
  bool tracking() const {
    return active_ && opts_.max_in_flight > 0 && roles_.has(role::collector);
  }

  /// The next seq of this incarnation.
  std::uint64_t next_seq() {
    return ++seq_;
  }

  /// Publishes `d` (through the storage loader if there is one).
  void emit(const context_delta& d);

  /// Sends `d` (already numbered) and keeps it until acknowledged: bounded
  /// by the window, spooled first, resent on the timer.
  void send_tracked(context_delta d);

  /// No delta of any incarnation is waiting for an ack.
  bool nothing_unacked() const {
    return unacked_.empty() && recovered_.empty();
  }

  /// A learner acknowledged something or is (or was) connected: one that
  /// can ack this collector's deltas exists.
  bool heard_of_learner() const {
    return acked_any_ || knew_learner_;
  }

  /// Deltas of this incarnation not acknowledged yet.
  std::size_t unacked() const {
    return unacked_.size();
  }

  /// The window of unacknowledged deltas is full.
  bool window_full() const {
    return tracking() && unacked_.size() >= opts_.max_in_flight
      && !svc_->finished();
  }

  /// The window wait timed out: gives up the oldest unacked delta.
  void evict_oldest();

  /// An ack on this collector's ack topic.
  void on_ack(const context_ack& ack);

  /// A learner (re)connected: resends everything unacknowledged now. Also
  /// keeps track of which learners are connected (learners_gone).
  void on_peer(const peer_event& ev);

  /// Every learner this collector was connected to is lost, so no ack can
  /// come any more: a stopping collector need not wait out its drain for one.
  bool learners_gone() const {
    return knew_learner_ && learners_.empty();
  }

  /// The collector quits with deltas unacknowledged because every learner is
  /// gone: counts them (deltas_abandoned) and logs what becomes of them.
  void report_abandoned();

  /// Republishes what earlier incarnations left in the spool (once).
  void republish_recovered();

  /// Takes over what earlier incarnations of this node left in `dir`.
  void open_spool(const std::string& dir, bool fsync);

  /// The run is over (or this incarnation stops): removes or keeps the spool.
  void close_spool();

 private:
  std::uint64_t lowest_unacked(std::uint64_t next) const {
    return unacked_.empty() ? next : unacked_.front().delta.seq;
  }

  struct unacked_delta {
    context_delta delta;
    caf::actor_clock::time_point sent_at;
    // Recovered from the spool and not republished yet.
    bool unsent = false;
  };

  void publish_delta(const context_delta& d);
  void resend(unacked_delta& x, caf::actor_clock::time_point now);
  void resend_recovered(std::deque<unacked_delta>& xs, unacked_delta& x,
                        caf::actor_clock::time_point now);
  void spool_failed(const caf::error& err);
  void spool_settled();
  void arm_resend();
  void on_resend_timer();
  void on_recovered_ack(const context_ack& ack);
  void fast_resend(const context_ack& ack);

  context_exchanger_options opts_;
  std::shared_ptr<context_exchange_stats> stats_;
  node_services* svc_ = nullptr;
  role_set roles_;
  bool active_ = false;
  std::uint64_t seq_ = 0;

  // Receiver: streams applied since the last merge (acked then), and what
  // waits unmerged (the learner's bounded buffer).
  std::set<sender_key> to_ack_;
  // The highest ack sent (or counted by the group) per stream: what `reack`
  // repeats. Bounded like `applied`.
  std::map<sender_key, std::uint64_t> acked_;
  void raise_acked(const sender_key& key, std::uint64_t upto);
  void send_upto(const sender_key& key, std::uint64_t upto);
  std::size_t box_deltas_ = 0;
  std::size_t box_bytes_ = 0;

  // Sender: deltas the learner has not acknowledged yet, oldest first.
  std::deque<unacked_delta> unacked_;
  // The spool (null: none): every delta of `unacked_` is in it, written
  // before it was published.
  std::unique_ptr<context_spool> spool_;
  // Unacknowledged deltas earlier incarnations of this node left in the
  // spool, by their incarnation: resent like `unacked_` until acknowledged.
  std::map<std::uint64_t, std::deque<unacked_delta>> recovered_;
  bool republished_ = false;
  bool resend_armed_ = false;
  // The last seq fast_resend sent again (once per delta).
  std::uint64_t fast_resent_ = 0;
  bool acked_any_ = false;
  // Connections to learners up now by node (peer events; counted, so that a
  // reconnect whose up precedes the old connection's down keeps the node),
  // and whether any learner ever was connected.
  std::map<std::uint32_t, int> learners_;
  bool knew_learner_ = false;
};

/// Raises `peak` to `x` if `x` is larger (counters shared across threads).
inline void raise_peak(std::atomic<std::uint64_t>& peak, std::uint64_t x) {
  auto cur = peak.load();
  while (x > cur && !peak.compare_exchange_weak(cur, x)) {
    // retry: another exchanger raised it meanwhile
  }
}

} // namespace dice::detail
