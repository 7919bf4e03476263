#pragma once

#include "dice/exchangers/loader_options.hpp"
#include "dice/security/senders.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/storage/storage.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include <string>
#include <vector>

namespace dice {

/// DI-engine's FileStorageLoader as a worker actor: stores context deltas
/// (a collector's trajectories) in files or shared memory off the role
/// actor, removes each one `ttl` after its save completed and everything
/// left when it stops.
using storage_loader_actor = caf::typed_actor<
  // save(delta) -> where it was stored.
  caf::replies_to<save_atom, context_delta>::with<storage_ref>,
  // load(ref) -> the delta (fresh bytes).
  caf::replies_to<load_atom, storage_ref>::with<context_delta>,
  // save(delta, router, topics): store, then publish (topic, ref) on the
  // router for each topic (DI-engine's save(cb) with cb = emit).
  caf::reacts_to<save_atom, context_delta, caf::actor,
                 std::vector<std::string>>,
  // load(ref, receiver, topic) -> true: load, send (topic, context_delta) to
  // the receiver, then answer (so the answer comes after the item); a ref
  // outside this loader's directory or shm namespace is refused, a deleted
  // or expired item gives DI-engine's warning, and the answer is false.
  caf::replies_to<load_atom, storage_ref, caf::actor, std::string>::with<bool>,
  // flush -> true once every earlier save has been published (the role
  // actor's barrier before it tells its router the run is over and it is done)
  caf::replies_to<flush_atom>::with<bool>,
  // internal: remove expired items
  caf::reacts_to<tick_atom>>;

/// State of a storage loader.
struct storage_loader_state {
  /// Owns the stored items.
  std::unique_ptr<storage_keeper> keeper;
  /// Settings.
  loader_options opts;
  /// A sweep is scheduled.
  bool sweeping = false;
  /// Messages dropped because of their sender, logged once per source.
  drop_log drops;
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
