#include "dice/actors/model_loader.hpp"

#include "dice/runtime/scheduling.hpp"

#include "loader_impl.hpp"

namespace dice {

namespace detail {

template <>
const char* missing_warning<model_snapshot>() {
  return "Model";
}

template <>
caf::expected<model_snapshot>
load_as<model_snapshot>(const storage_ref& ref, const storage_options& opts) {
  if (auto err = confine(ref, opts))
    return err;
  return load_snapshot(ref);
}

} // namespace detail

model_loader_actor::behavior_type
model_loader_behavior(model_loader_actor::stateful_pointer<model_loader_state> self,
             loader_options opts) {
  return detail::loader_behavior<model_snapshot, decltype(self),
                                 model_loader_state>(self, std::move(opts));
}

model_loader_actor spawn_model_loader(caf::actor_system& sys,
                                      loader_options opts) {
  if (opts.detached && !deterministic_scheduler(sys))
    return sys.spawn<caf::detached>(model_loader_behavior, std::move(opts));
  return sys.spawn(model_loader_behavior, std::move(opts));
}

} // namespace dice
