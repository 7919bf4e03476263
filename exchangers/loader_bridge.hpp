#pragma once

// Internal: how exchangers reach a loader (DI-engine's `storage_loader=` /
// `model_loader=`) without blocking the role actor. The loader answers
// with a message on the exchanger's own topic, so the exchanger's handler
// sees a loaded item exactly like one that came over the router.

#include "dice/logging/log.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/pipeline/middleware.hpp"

#include <string>

namespace dice::detail {

/// Asks `loader` to load `ref` (that arrived on `topic`) and hand the item to
/// the topic's handlers (node_services::load, so the node waits for it before
/// it ends a wait on finish or quits). Without a loader the reference is
/// dropped with DI-engine's message (it raised instead).
template <class Loader>
void load_reference(node_services& svc, const Loader& loader,
                    const std::string& topic, const storage_ref& ref) {
  if (!loader) {
    svc.add_to_report(report_counter::models_dropped);
    log::error(svc.node_id(),
               "Storage loader is not defined when data is a storage object. "
               "Dropped "
                 + ref.path + " from node " + std::to_string(ref.origin)
                 + " on topic '" + topic + "'");
    return;
  }
  svc.load(loader, ref, topic);
}

} // namespace dice::detail
