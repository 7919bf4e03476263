#pragma once

#include "dice/exchangers/loader_options.hpp"
#include "dice/pipeline/loaders.hpp"

#include "caf/actor_system.hpp"

namespace dice {

/// Spawns a storage loader (DI-engine's FileStorageLoader; detached unless
/// `opts.detached` is false). Its messages: loader_actor.
storage_loader_actor spawn_storage_loader(caf::actor_system& sys,
                                          loader_options opts = {});

} // namespace dice
