#pragma once

#include "dice/actors/storage_loader.hpp"
#include "dice/core/role.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/timespan.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dice {

/// What a context exchanger did for exactly-once delivery and backpressure
/// (shared with tests and tools; every field is safe to read concurrently).
struct context_exchange_stats {
  /// Deltas a collector published for the first time.
  std::atomic<std::uint64_t> deltas_sent{0};
  /// Deltas a collector published again because no ack came in time or a
  /// learner (re)connected.
  std::atomic<std::uint64_t> deltas_resent{0};
  /// Of those, deltas resent at once because a learner (re)connected
  /// (peer_event) instead of after `resend_timeout`.
  std::atomic<std::uint64_t> deltas_resent_on_connect{0};
  /// Of those, deltas resent at once because an ack stopped just below them
  /// (the learner took later deltas but lacks this one).
  std::atomic<std::uint64_t> deltas_fast_resent{0};
  /// Acks a collector received that freed at least one delta.
  std::atomic<std::uint64_t> acks_received{0};
  /// Acks a learner published.
  std::atomic<std::uint64_t> acks_sent{0};
  /// Times a collector's before-part waited because its window was full.
  std::atomic<std::uint64_t> window_waits{0};
  /// Total time (ns, actor clock) collectors spent waiting for the window.
  std::atomic<std::int64_t> window_wait_ns{0};
  /// Unacked deltas dropped because the window wait timed out (data loss).
  std::atomic<std::uint64_t> deltas_evicted{0};
  /// Deltas a learner refused (unapplied, unacked) because its buffer was
  /// full; the sender resends them.
  std::atomic<std::uint64_t> deltas_refused{0};
  /// Most deltas a learner held unmerged at once.
  std::atomic<std::uint64_t> buffered_peak{0};
  /// Most payload bytes a learner held unmerged at once.
  std::atomic<std::uint64_t> buffered_bytes_peak{0};
  /// Most unacked deltas a collector held at once.
  std::atomic<std::uint64_t> unacked_peak{0};
  /// Deltas a learner of a group held back because an earlier one of their
  /// stream had not arrived yet (counted once it did: never out of order).
  std::atomic<std::uint64_t> deltas_past_gap{0};
  /// Deltas a learner of a group left to the learner that owns their
  /// collector (neither applied nor acked).
  std::atomic<std::uint64_t> deltas_not_owned{0};
  /// Deltas a collector wrote to its spool before publishing them.
  std::atomic<std::uint64_t> deltas_spooled{0};
  /// Deltas of earlier incarnations a collector found in its spool and
  /// republished under their own incarnation and seq.
  std::atomic<std::uint64_t> deltas_recovered{0};
  /// Spool writes that failed (the collector went on without its spool).
  std::atomic<std::uint64_t> spool_errors{0};
  /// Unacknowledged deltas a collector stopped without, because every
  /// learner it had been connected to was gone (none could ack them).
  std::atomic<std::uint64_t> deltas_abandoned{0};
};

/// How a learner of a data-parallel group (docs/learner_group.md) takes its
/// share of the collectors' context: it applies only the deltas of the
/// collectors it owns, and acknowledges them only once the group counted
/// them (so a delta whose learner died before that is resent to its new
/// owner instead of being lost).
struct context_partition {
  /// True for the collector nodes whose deltas this learner applies (null:
  /// every one). Asked for every delta, so an owner change applies at once.
  std::function<bool(std::uint32_t)> owns;
  /// Merges do not acknowledge; `ack_now` does.
  bool defer_acks = false;
  /// Set by the exchanger when it attaches: acknowledges every delta merged
  /// so far.
  std::function<void()> ack_now;
  /// Set by the exchanger: the latest incarnation heard from `collector` and
  /// the seq up to which its deltas are settled here ({0, 0}: none heard).
  std::function<std::pair<std::uint64_t, std::uint64_t>(std::uint32_t)>
    watermark;
  /// Set by the exchanger: treats `collector`'s deltas of `incarnation` up to
  /// `upto` as applied (a lost learner's group counted them already).
  std::function<void(std::uint32_t, std::uint64_t, std::uint64_t)> settle;
};

/// The topic a learner acknowledges node `collector`'s deltas on.
std::string context_ack_topic(std::uint32_t collector);

/// Options of the context exchanger (DI-engine's ContextExchanger).
struct context_exchanger_options {
  /// Collectors and evaluators do not wait for context during their first
  /// `skip_n_iter` iterations (DI-engine: ignored on the learner).
  std::int64_t skip_n_iter = 1;
  /// How long a collector or evaluator waits for context (DI-engine: 60 s).
  caf::timespan timeout = std::chrono::seconds{60};
  /// How long a learner waits for context. DI-engine waits forever; dice
  /// warns after this deadline and goes on (and always stops on finish).
  caf::timespan learner_timeout = std::chrono::seconds{60};
  /// DI-engine's `storage_loader=`: when set, a collector's context goes to
  /// this loader, which stores it and publishes only a storage_ref
  /// (off the role actor: DI-engine saved synchronously); receivers load
  /// references through their own loader. Null: context travels on the router.
  storage_loader_actor storage_loader;
  /// Exactly-once with backpressure: a collector keeps at most this many
  /// deltas the learner has not acknowledged; with a full window its
  /// before-part waits. 0: DI-engine's fire-and-forget (no window, no
  /// resend). With a storage_loader too: a resend stores the delta again.
  /// 32: a window is worth window / round trip deltas a second, and a
  /// round trip under load is ~0.6 ms on a 2-core host: 8 held 3 collectors
  /// of 16-transition deltas to 0.5-0.7M transitions/s, 32 gives 1.4M
  /// (bench/run's small-delta row; issue 25 item 2). At one delta in
  /// flight the window changes nothing.
  std::size_t max_in_flight = 32;
  /// A collector resends unacked deltas older than this (e.g. lost on the
  /// way; the learner drops any duplicate). When a learner (re)connects it
  /// resends them all at once instead.
  caf::timespan resend_timeout = std::chrono::seconds{5};
  /// Longest wait for a free window slot; past it the collector warns,
  /// drops its oldest unacked delta (counted in deltas_evicted) and goes on.
  caf::timespan window_timeout = std::chrono::seconds{60};
  /// A learner holds at most this many unmerged deltas; more are refused
  /// unapplied and unacked (their senders resend them). Collector windows
  /// already bound the buffer to collectors x max_in_flight; this cap guards
  /// against many or misbehaving senders. 0: unbounded.
  std::size_t max_buffered = 1024;
  /// A learner holds at most this many unmerged payload bytes (0:
  /// unbounded); one delta is always accepted into an empty buffer.
  std::size_t max_buffered_bytes = std::size_t{1} << 30;
  /// Receives the exchanger's counters (null: none kept outside).
  std::shared_ptr<context_exchange_stats> stats;
  /// A learner's share of the collectors in a group (null: all of them).
  std::shared_ptr<context_partition> partition;
  /// A collector tracking acks (max_in_flight > 0) writes each delta to an
  /// append-only spool in this directory before publishing it and forgets
  /// it once acknowledged; a later incarnation of the same node (after
  /// kill -9, say) republishes what its predecessors left unacknowledged,
  /// under their incarnation and seqs, so the learner applies each exactly once
  /// (storage/context_spool.hpp). Empty: the node's --dice.spool-dir
  /// (node_services::spool_dir); "-": no spool even then.
  std::string spool_dir;
  /// fdatasync every spool write (power loss; process death needs none).
  /// Also on with the node's --dice.spool-fsync.
  bool spool_fsync = false;
};

/// The event (topic) a node with role `r` emits its context on:
/// "context_exchanger_learner", ... (independent of any language version).
std::string context_topic(role r);

/// Exchanges context between nodes: collectors send env_step / env_episode
/// increments, trajectories, episodes and trajectory_end_idx; learners send
/// train_iter; learners and evaluators sum the increments; collectors and
/// evaluators take train_iter; only learners keep trajectories (their
/// trajectory_end_idx offset into the merged list). See docs/exchangers.md.
middleware context_exchanger(context_exchanger_options opts = {});

} // namespace dice
