#pragma once

// One learner node's membership in a data-parallel group (issue 12): forms
// the group through dice's router (rank 0 announces each generation on
// `learner_group_topic` and holds its rendezvous store, which the others
// reach with text requests over the router: no store port listens), keeps the
// group's env_step / env_episode exact, partitions the collectors' context
// between the learners, and re-forms the group without a learner that died. The
// application supplies the model-specific parts (`sync_state`, `progress`) and
// calls `sync` once per iteration and the group's collectives between backward
// and step.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/torch/learner_group.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dice {

/// Where a learner stands in its group and how long it waits for it.
struct learner_group_member_options {
  /// This learner's rank (learner nodes ordered by node id: 0..size-1).
  int rank = 0;
  /// Learners in the group.
  int size = 1;
  /// This learner's cluster address: Gloo binds its pairs to it (loopback
  /// for a loopback cluster).
  std::string address = "127.0.0.1";
  /// The cluster secret (node_config::secret): every pair of the group
  /// proves membership with it once connected; empty: no proof.
  std::string secret;
  /// Deadline for forming (all ranks connected).
  std::chrono::milliseconds join_timeout{30000};
  /// Deadline of each collective: the per-iteration sync waits here for the
  /// slowest learner's data, so it must exceed the gaps between data.
  std::chrono::milliseconds timeout{60000};
  /// How gradients are all-reduced.
  reduce_mode mode = reduce_mode::automatic;
  /// After a failed step survivors announce themselves this long before
  /// they re-form without those not heard from.
  caf::timespan reform_window = std::chrono::seconds{2};
  /// A learner that (re)started while its group runs (e.g. dice-launch
  /// --max-restarts restarted it): instead of forming generation 0 it asks
  /// the group to admit it (`dice-lg1 join` on `learner_group_alive_topic`),
  /// and joins the next generation as its last rank, with the group's state.
  bool rejoin = false;
  /// Collector node ids are below this: every sync carries, per collector,
  /// how far its owner counted its deltas (3 doubles each), so a learner
  /// that takes a lost learner's collectors over skips what the group
  /// counted already.
  std::uint32_t max_nodes = 256;
};

/// One learner's membership; shared by the middleware it makes, the
/// context exchanger's partition and the application's train step (all on
/// the learner's role actor).
class learner_group_member {
 public:
  /// Brings this rank to rank `root`'s state after the group (re)formed
  /// (broadcast the model, optimizer and the application's counters).
  using sync_state_fn = std::function<caf::error(learner_group& g, int root,
                                                 context& ctx)>;

  /// A member that forms its group when its middleware first runs.
  explicit learner_group_member(learner_group_member_options opts);

  ~learner_group_member();

  /// Set before the run: see `sync_state_fn`.
  sync_state_fn sync_state;

  /// Set before the run: this rank's progress (e.g. gradient steps); after
  /// a re-formation the rank with the most becomes the `sync_state` root.
  std::function<std::int64_t()> progress;

  /// Forms and re-forms the group; put it first in the learner's pipeline.
  middleware make_middleware();

  /// For `context_exchanger_options::partition`.
  std::shared_ptr<context_partition> partition() const;

  /// The group while it works (null before forming, after a failure until
  /// re-formed, and after leaving).
  learner_group* group();

  /// This learner's rank in the current generation.
  int rank() const;

  /// Learners in the current generation.
  int size() const;

  /// Re-formations so far.
  std::uint64_t generation() const;

  /// True if this learner applies `collector`'s context: collector node id
  /// mod the group's size names a slot; a slot's learner keeps it across
  /// re-formations after a failure, a dead learner's slots go to survivors
  /// by slot mod survivors (so no live learner's collectors change hands);
  /// a join makes it collector id mod the new size (collectors that change
  /// hands start where the group counted them). A joiner owns nothing until
  /// its generation formed.
  bool owns(std::uint32_t collector) const;

  /// One iteration's bookkeeping, on every rank: sums every rank's env_step
  /// and env_episode since the last sync (ctx then holds the group's
  /// totals), sums `extra` in place, and ORs `stop`; then acknowledges the
  /// context merged so far. Returns whether any rank asked to stop; an
  /// error marks the group failed (re-formed before the next iteration).
  /// If rank 0 had a join request, every rank admits the joiner here: the
  /// partition changes at once and `group()` is null until the larger
  /// generation formed (before the next iteration).
  caf::expected<bool> sync(context& ctx, std::vector<double>& extra, bool stop);

  /// Marks the group failed after one of its collectives returned `err`:
  /// logs it and drops the group, so the peers fail at once too.
  void fail(const caf::error& err);

  /// True once the group lost its rank 0: the survivors stop the run (rank 0
  /// alone publishes models; re-forming around a new one is not built).
  bool rank_zero_lost() const;

  /// True if this learner writes the group's checkpoint when the run ends:
  /// rank 0, or after rank 0 was lost, the lowest survivor.
  bool writes_last_checkpoint() const;

  /// Ends this learner's membership (peers see the closed connections).
  void leave();

  struct state;

 private:
  std::shared_ptr<state> st_;
};

} // namespace dice
