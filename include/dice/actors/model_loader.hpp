#pragma once

#include "dice/actors/loader.hpp"
#include "dice/messages/model_snapshot.hpp"

namespace dice {

/// DI-engine's FileModelLoader: a loader of model snapshots (see
/// loader_actor for its messages).
using model_loader_actor = loader_actor<model_snapshot>;

/// State of a model loader.
struct model_loader_state : loader_state {
  /// Name in CAF's logs.
  static inline const char* name = "dice.model_loader";
};

/// Behaviour of a model loader.
model_loader_actor::behavior_type model_loader_behavior(
  model_loader_actor::stateful_pointer<model_loader_state> self,
  loader_options opts);

/// Spawns a model loader (detached unless `opts.detached` is false).
model_loader_actor spawn_model_loader(caf::actor_system& sys,
                                      loader_options opts = {});

} // namespace dice
