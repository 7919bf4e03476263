#pragma once

// Internal: how exchangers reach a loader (DI-engine's `storage_loader=` /
// `model_loader=`) without blocking the role actor. The loader answers
// with a message on the exchanger's own topic, so the exchanger's handler
// sees a loaded item exactly like one that came over the router.

#include "dice/logging/log.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/runtime/middleware.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_cast.hpp"
#include "caf/send.hpp"
#include "caf/type_erased_tuple.hpp"

#include <string>

namespace dice::detail {

/// The role actor and router behind a node_services.
struct role_handles {
  /// The role actor (receives what a loader loaded).
  caf::actor self;
  /// Its router (a loader publishes the storage_ref it saved there).
  caf::actor router;
};

/// Handles of the role actor `svc` belongs to.
inline role_handles handles_of(node_services& svc) {
  return role_handles{svc.handle(), svc.router_handle()};
}

/// If `msg` is `(topic, storage_ref)`: asks `loader` to load it and send
/// `(topic, item)` back to the node (node_services::load, so the node waits
/// for it before it ends a wait on finish or quits), and returns true.
/// Without a loader the reference is dropped with DI-engine's message (it
/// raised instead). `self` is unused (kept for the callers' signature).
template <class Loader>
bool forward_storage_ref(node_services& svc, const Loader& loader,
                         [[maybe_unused]] const caf::actor& self,
                         const caf::type_erased_tuple& msg) {
  if (!msg.match_elements<std::string, storage_ref>())
    return false;
  auto& topic = msg.get_as<std::string>(0);
  auto& ref = msg.get_as<storage_ref>(1);
  if (!loader) {
    ++svc.report().models_dropped;
    log::error(svc.node_id(),
               "Storage loader is not defined when data is a storage object. "
               "Dropped "
                 + ref.path + " from node " + std::to_string(ref.origin)
                 + " on topic '" + topic + "'");
    return true;
  }
  svc.load(caf::actor_cast<caf::actor>(loader), ref, topic);
  return true;
}

} // namespace dice::detail
