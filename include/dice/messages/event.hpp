#pragma once

#include "caf/message.hpp"
#include "caf/meta/type_name.hpp"

#include <cstdint>

namespace dice {

/// A user's event on a topic (dice::topic<T>, DI-engine's `task.emit`): any
/// type registered in a CAF type-ID block, carried as a one-element message
/// (protocol v7). dice's own messages (context_delta, model_snapshot,
/// storage_ref, context_ack) travel unwrapped; everything else rides in
/// this envelope so that role actors keep a typed interface.
struct event {
  /// Node that emitted it (a router checks it against the peer it came from).
  std::uint32_t sender = 0;
  /// The value, a message of exactly one element.
  caf::message content;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, event& x) {
  return f(caf::meta::type_name("dice::event"), x.sender, x.content);
}

} // namespace dice
