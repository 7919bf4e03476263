#pragma once

// What every fuzz target shares: an item type like a user's, and an actor
// system that knows dice's message types (for CAF deserialization).

#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>

#include <string>
#include <vector>

namespace fuzz {

/// A user's item: strings, nested vectors, a bool.
struct item {
  std::string name;
  std::vector<float> obs;
  std::vector<std::vector<std::int32_t>> nested;
  bool done = false;
};

/// One actor system per process, with dice's types.
inline caf::actor_system& system() {
  struct config : caf::actor_system_config {
    config() {
      dice::add_message_types(*this);
      set("scheduler.max-threads", std::size_t{1});
      set("logger.verbosity", caf::atom("quiet"));
    }
  };
  // Never destroyed: ~actor_system at exit races CAF's own statics.
  static auto* sys = new caf::actor_system{*new config};
  return *sys;
}

} // namespace fuzz

namespace boost::serialization {

template <class Archive>
void serialize(Archive& ar, fuzz::item& x, const unsigned int) {
  ar& x.name& x.obs& x.nested& x.done;
}

} // namespace boost::serialization
