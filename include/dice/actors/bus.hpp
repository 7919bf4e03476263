#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dice/messages/finish.hpp"
#include "dice/role.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor.hpp"
#include "caf/message.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/typed_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

namespace dice {

/// A node's message router: role actors join it, subscribe to topics and
/// publish on them; it delivers each message once to every subscriber of
/// its topic on another node (DI-engine's `emit(only_remote=True)` +
/// `on`), holds messages for topics nobody subscribed to yet, and spreads
/// `finish`.
using bus_actor = caf::typed_actor<
  // join(node, roles, member, topics) -> the finish, if the run is over.
  caf::replies_to<join_atom, std::uint32_t, role_set, caf::actor,
                  std::vector<std::string>>::with<std::vector<finish>>,
  // subscribe(topic, node, member)
  caf::reacts_to<subscribe_atom, std::string, std::uint32_t, caf::actor>,
  // publish(topic, sender node, message)
  caf::reacts_to<publish_atom, std::string, std::uint32_t, caf::message>,
  // the run is over
  caf::reacts_to<finish>,
  // done(node, member): the member has finished its last iteration and will
  // publish nothing more; once every member is done, each gets (done).
  caf::reacts_to<done_atom, std::uint32_t, caf::actor>>;

/// Settings of a bus.
struct bus_config {
  /// Messages held per topic while nobody subscribes (oldest dropped).
  std::size_t max_held_per_topic = 1024;
};

/// One subscriber of a topic.
struct bus_subscriber {
  /// The subscriber's node id (messages from that node are not echoed).
  std::uint32_t node = 0;
  /// The subscriber.
  caf::actor member;
};

/// State of a bus.
struct bus_state {
  /// Settings.
  bus_config cfg;
  /// Every joined role actor.
  std::vector<bus_subscriber> members;
  /// Subscribers per topic, each once.
  std::map<std::string, std::vector<bus_subscriber>> topics;
  /// Messages published while a topic had no subscriber.
  std::map<std::string, std::deque<std::pair<std::uint32_t, caf::message>>>
    held;
  /// Members that finished their last iteration.
  std::vector<caf::actor> done;
  /// Set once the run is over.
  std::optional<finish> finished;
  /// Messages dropped from the hold because it was full.
  std::uint64_t held_dropped = 0;
  /// Name in CAF's logs.
  static inline const char* name = "dice.bus";
};

/// Behaviour of a bus.
bus_actor::behavior_type bus(bus_actor::stateful_pointer<bus_state> self,
                             bus_config cfg);

} // namespace dice
