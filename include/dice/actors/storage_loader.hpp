#pragma once

#include "dice/actors/loader.hpp"
#include "dice/messages/context_delta.hpp"

namespace dice {

/// DI-engine's FileStorageLoader: a loader of context deltas, a
/// collector's trajectories (see loader_actor for its messages).
using storage_loader_actor = loader_actor<context_delta>;

/// State of a storage loader.
struct storage_loader_state : loader_state {
  /// Name in CAF's logs.
  static inline const char* name = "dice.storage_loader";
};

/// Behaviour of a storage loader.
storage_loader_actor::behavior_type storage_loader_behavior(
  storage_loader_actor::stateful_pointer<storage_loader_state> self,
  loader_options opts);

/// Spawns a storage loader (detached unless `opts.detached` is false).
storage_loader_actor spawn_storage_loader(caf::actor_system& sys,
                                          loader_options opts = {});

} // namespace dice
