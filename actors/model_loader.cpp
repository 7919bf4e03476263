#include "dice/actors/model_loader.hpp"

#include "loader_impl.hpp"

namespace dice {

namespace {

/// State of a model loader.
struct model_loader_state : detail::loader_state {
  /// Name in CAF's logs.
  static inline const char* name = "dice.model_loader";
};

model_loader_actor::behavior_type model_loader_behavior(
  model_loader_actor::stateful_pointer<model_loader_state> self,
  loader_options opts) {
  return detail::loader_behavior(
    self, std::move(opts),
    detail::loader_kind<model_snapshot>{"Model", load_snapshot});
}

} // namespace

model_loader_actor spawn_model_loader(caf::actor_system& sys,
                                      loader_options opts) {
  return detail::spawn_loader<model_loader_actor>(sys, model_loader_behavior,
                                                  std::move(opts));
}

} // namespace dice
