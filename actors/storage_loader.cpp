#include "dice/actors/storage_loader.hpp"

#include "dice/runtime/scheduling.hpp"

#include "loader_impl.hpp"

namespace dice {

namespace detail {

template <>
const char* missing_warning<context_delta>() {
  return "Context";
}

template <>
caf::expected<context_delta>
load_as<context_delta>(const storage_ref& ref, const storage_options& opts) {
  if (auto err = confine(ref, opts))
    return err;
  return load_context(ref);
}

} // namespace detail

storage_loader_actor::behavior_type storage_loader_behavior(
  storage_loader_actor::stateful_pointer<storage_loader_state> self,
  loader_options opts) {
  return detail::loader_behavior<context_delta, decltype(self),
                                 storage_loader_state>(self, std::move(opts));
}

storage_loader_actor spawn_storage_loader(caf::actor_system& sys,
                                          loader_options opts) {
  if (opts.detached && !deterministic_scheduler(sys))
    return sys.spawn<caf::detached>(storage_loader_behavior, std::move(opts));
  return sys.spawn(storage_loader_behavior, std::move(opts));
}

} // namespace dice
