#pragma once

#include "dice/messages/payload.hpp"

#include <any>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace dice {

/// One context delta a learner merged into an iteration: who sent it, from
/// which incarnation, its seq, and the model version that acted.
struct merged_delta {
  /// Node id of the sender.
  std::uint32_t sender = 0;
  /// Incarnation of the sender.
  std::uint64_t incarnation = 0;
  /// The delta's seq (0: unsequenced).
  std::uint64_t seq = 0;
  /// Version of the model that produced its data (-1: none).
  std::int64_t model_version = -1;
};

/// DI-engine's OnlineRLContext: what one iteration of a pipeline reads and
/// writes. `renew()` starts the next iteration and keeps only the fields
/// DI-engine keeps.
struct context {
  /// Index of the current iteration (0-based).
  std::int64_t total_step = 0;
  /// Environment steps: a collector's own count; on a learner or an
  /// evaluator, the sum of the collectors' increments.
  std::int64_t env_step = 0;
  /// Environment episodes, counted like env_step.
  std::int64_t env_episode = 0;
  /// Training iterations of the learner (collectors receive it).
  std::int64_t train_iter = 0;
  /// Trajectories of this iteration ("None" when empty): what a collector
  /// produced, or what a learner received, merged from all senders.
  std::vector<payload> trajectories;
  /// Episodes of this iteration, like trajectories.
  std::vector<payload> episodes;
  /// Ends of trajectories as indices into the flattened trajectories; after
  /// a merge on the learner they are offset so they index the merged list.
  std::vector<std::int64_t> trajectory_end_idx;
  /// train_iter of the last evaluation (-1: none yet).
  std::int64_t last_eval_iter = -1;
  /// Return of the last evaluation.
  double last_eval_value = -std::numeric_limits<double>::infinity();
  /// Evaluation return of this iteration, if an evaluator ran.
  double eval_value = -std::numeric_limits<double>::infinity();
  /// Link to an experiment tracker, kept across iterations like DI-engine.
  std::string wandb_url;
  /// Version of the model the node currently holds (-1: none).
  std::int64_t model_version = -1;
  /// The deltas a learner's context exchanger merged into this iteration,
  /// in the order it applied them (what --dice.record writes down).
  std::vector<merged_delta> merged_deltas;
  /// Per-iteration scratch space for user middleware (train_output,
  /// collect_kwargs, ...); cleared by renew().
  std::map<std::string, std::any> scratch;
  /// State user middleware keeps across iterations (never cleared).
  std::map<std::string, std::any> keep;

  /// Starts the next iteration: keeps env_step, env_episode, train_iter,
  /// last_eval_iter, last_eval_value, wandb_url (DI-engine's keep list) plus
  /// model_version and `keep`, resets everything else, total_step + 1.
  void renew();

  /// Number of trajectory items (sum over payloads).
  std::uint64_t trajectory_count() const {
    return item_count(trajectories);
  }
};

} // namespace dice
