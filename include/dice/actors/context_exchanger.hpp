#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "dice/actors/storage_loader.hpp"
#include "dice/middleware.hpp"
#include "dice/role.hpp"

#include "caf/timespan.hpp"

namespace dice {

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
  /// references through their own loader. Null: context travels on the bus.
  storage_loader_actor storage_loader;
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
