#pragma once

#include "dice/exchangers/loader_options.hpp"
#include "dice/pipeline/loaders.hpp"

#include "caf/actor_system.hpp"

namespace dice {

/// Spawns a model loader (DI-engine's FileModelLoader; detached unless
/// `opts.detached` is false). Its messages: loader_actor.
model_loader_actor spawn_model_loader(caf::actor_system& sys,
                                      loader_options opts = {});

} // namespace dice
