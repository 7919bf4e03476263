#pragma once

#include "dice/actors/model_loader.hpp"
#include "dice/core/model.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/timespan.hpp"

#include <chrono>

namespace dice {

/// Options of the model exchanger (DI-engine's ModelExchanger).
struct model_exchanger_options {
  /// How long a non-learner waits for a newer model (DI-engine: 60 s).
  caf::timespan timeout = std::chrono::seconds{60};
  /// DI-engine's `model_loader=`: when set, the learner hands snapshots to
  /// this loader, which stores them and publishes only a storage_ref;
  /// receivers load references through their own loader. Null: snapshots
  /// travel on the router. The exchanger stops the loader when the node stops.
  model_loader_actor model_loader;
};

/// The topic models travel on.
inline constexpr const char* model_topic = "model_exchanger";

/// Learners send a snapshot of `model` after every iteration; every other
/// role waits (up to `timeout`) for a newer model before each iteration
/// except the first, and loads it. Snapshots older than the loaded one, or
/// that do not fit the model, are dropped with a log line.
middleware model_exchanger(model_port_ptr model,
                           model_exchanger_options opts = {});

} // namespace dice
