#pragma once

// The typed handles of dice's loaders (actors/storage_loader.hpp,
// actors/model_loader.hpp): middleware hands work to a loader through
// node_services, so the pipeline layer needs their interfaces, while the
// actors themselves live a layer above it.

#include "dice/messages/context_delta.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor.hpp"
#include "caf/typed_actor.hpp"

#include <string>
#include <vector>

namespace dice {

/// A worker actor that stores items of type T (DI-engine's FileModelLoader
/// for model snapshots, FileStorageLoader for context deltas) in files or
/// shared memory off the role actor, removes each one `ttl` after its save
/// completed and everything left when it stops. See model_loader_actor and
/// storage_loader_actor.
template <class T>
using loader_actor = caf::typed_actor<
  // save(item) -> where it was stored.
  typename caf::replies_to<save_atom, T>::template with<storage_ref>,
  // load(ref) -> the item (fresh bytes).
  typename caf::replies_to<load_atom, storage_ref>::template with<T>,
  // save(item, router, topics): store, then publish (topic, ref) on the
  // router for each topic (DI-engine's save(cb) with cb = emit).
  caf::reacts_to<save_atom, T, caf::actor, std::vector<std::string>>,
  // load(ref, receiver, topic) -> true: load, send (topic, item) to the
  // receiver, then answer (so the answer comes after the item); a ref
  // outside this loader's directory or shm namespace is refused, a deleted
  // or expired item gives DI-engine's warning, and the answer is false.
  typename caf::replies_to<load_atom, storage_ref, caf::actor,
                           std::string>::template with<bool>,
  // flush -> true once every earlier save has been published (the role
  // actor's barrier before it tells its router the run is over and it is done)
  typename caf::replies_to<flush_atom>::template with<bool>,
  // internal: remove expired items
  caf::reacts_to<tick_atom>>;

/// DI-engine's FileStorageLoader: a loader of context deltas, a
/// collector's trajectories (see loader_actor for its messages).
using storage_loader_actor = loader_actor<context_delta>;

/// DI-engine's FileModelLoader: a loader of model snapshots (see
/// loader_actor for its messages).
using model_loader_actor = loader_actor<model_snapshot>;

} // namespace dice
