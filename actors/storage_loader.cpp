#include "dice/actors/storage_loader.hpp"

#include "loader_impl.hpp"

namespace dice {

namespace {

/// State of a storage loader.
struct storage_loader_state : detail::loader_state {
  /// Name in CAF's logs.
  static inline const char* name = "dice.storage_loader";
};

storage_loader_actor::behavior_type storage_loader_behavior(
  storage_loader_actor::stateful_pointer<storage_loader_state> self,
  loader_options opts) {
  return detail::loader_behavior(
    self, std::move(opts),
    detail::loader_kind<context_delta>{"Context", load_context, payload_bytes});
}

} // namespace

storage_loader_actor spawn_storage_loader(caf::actor_system& sys,
                                          loader_options opts) {
  return detail::spawn_loader<storage_loader_actor>(
    sys, storage_loader_behavior, std::move(opts));
}

} // namespace dice
