#pragma once

// Internal: the single-slot model cache shared by both model exchangers.

#include "dice/core/errc.hpp"
#include "dice/core/model.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/pipeline/middleware.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace dice::detail {

/// Latest received snapshot (latest wins) plus what was loaded last.
class model_cache {
 public:
  /// The slot.
  std::optional<model_snapshot> slot;
  /// Arrival time of the newest cached snapshot (local clock).
  caf::actor_clock::time_point arrived;
  /// Sender of the last loaded model.
  std::uint32_t loaded_sender = 0;
  /// Sender incarnation of the last loaded model (0: none).
  std::uint64_t loaded_incarnation = 0;
  /// Version of the last loaded model.
  std::int64_t loaded_version = -1;

  /// True if `x` is not newer than what is loaded or cached from the same
  /// sender incarnation (sender and incarnation). DI-engine kept such a model
  /// and spun on it for 60 s. Versions of different senders or incarnations are
  /// never compared: a new incarnation starts over, and one sender's version
  /// (however large) says nothing about another's, so none can stall the
  /// receiver.
  bool outdated(const model_snapshot& x) const {
    if (loaded_incarnation != 0 && x.sender == loaded_sender
        && x.incarnation == loaded_incarnation && x.version <= loaded_version)
      return true;
    return slot && slot->sender == x.sender
      && slot->incarnation == x.incarnation && x.version <= slot->version;
  }

  /// Validates and caches `x`, or drops it with a log line.
  bool offer(node_services& svc, const model_snapshot& x) {
    if (outdated(x)) {
      svc.add_to_report(report_counter::models_dropped);
      log::debug(svc.node_id(),
                 "dropped model v{} from node {}: not newer than v{}",
                 x.version, x.sender, loaded_version);
      return false;
    }
    if (auto err = validate(x)) {
      svc.add_to_report(report_counter::models_dropped);
      log::error(svc.node_id(), "dropped an invalid model: " + render(err));
      return false;
    }
    slot = x;
    arrived = svc.now();
    return true;
  }

  /// Loads the cached snapshot into `model` and clears the slot. On error
  /// the model is untouched, the snapshot dropped and false returned.
  bool load(node_services& svc, model_port& model, context& ctx) {
    auto x = std::move(*slot);
    slot.reset();
    if (auto err = model.load(x)) {
      svc.add_to_report(report_counter::models_dropped);
      log::error(svc.node_id(),
                 "cannot load model v" + std::to_string(x.version)
                   + " from node " + std::to_string(x.sender) + ": "
                   + render(err));
      return false;
    }
    loaded_sender = x.sender;
    loaded_incarnation = x.incarnation;
    loaded_version = x.version;
    ctx.model_version = x.version;
    svc.add_to_report(report_counter::models_loaded);
    return true;
  }
};

/// Nanoseconds since the UNIX epoch on the wall clock (for send stamps).
inline std::int64_t wall_clock_ns() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch())
    .count();
}

/// Takes a snapshot of `model` stamped with sender, incarnation, version and
/// time.
inline caf::expected<model_snapshot>
stamped_snapshot(node_services& svc, model_port& model, std::int64_t version) {
  auto x = model.snapshot();
  if (!x)
    return x;
  x->sender = svc.node_id();
  x->incarnation = svc.incarnation();
  x->version = version;
  x->send_time_ns = wall_clock_ns();
  return x;
}

/// Remaining time of a budget that started at `start`.
inline caf::timespan remaining(node_services& svc,
                               caf::actor_clock::time_point start,
                               caf::timespan budget) {
  auto elapsed = svc.now() - start;
  if (elapsed >= budget)
    return caf::timespan{0};
  return std::chrono::duration_cast<caf::timespan>(budget - elapsed);
}

} // namespace dice::detail
