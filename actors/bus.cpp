#include "dice/actors/bus.hpp"

#include <algorithm>

#include "dice/log.hpp"

#include "caf/send.hpp"

namespace dice {

namespace {

void add_subscriber(bus_actor::stateful_pointer<bus_state> self,
                    const std::string& topic, std::uint32_t node,
                    const caf::actor& member) {
  auto& st = self->state;
  auto& subs = st.topics[topic];
  auto same = [&](const bus_subscriber& x) { return x.member == member; };
  // One subscription, one delivery: subscribing twice changes nothing.
  if (std::any_of(subs.begin(), subs.end(), same))
    return;
  subs.push_back(bus_subscriber{node, member});
  // Hand over what was published before anyone listened.
  auto i = st.held.find(topic);
  if (i == st.held.end())
    return;
  for (auto& [sender, msg] : i->second)
    if (sender != node)
      caf::anon_send(member, msg);
  st.held.erase(i);
}

// Once every member is done, all messages they published have been
// forwarded (each member's publishes precede its done), so each member may
// stop with nothing in flight.
void check_all_done(bus_actor::stateful_pointer<bus_state> self) {
  auto& st = self->state;
  if (!st.finished || st.done.empty())
    return;
  for (auto& m : st.members)
    if (std::find(st.done.begin(), st.done.end(), m.member) == st.done.end())
      return;
  for (auto& m : st.done)
    caf::anon_send(m, done_atom::value);
  st.done.clear();
}

} // namespace

bus_actor::behavior_type bus(bus_actor::stateful_pointer<bus_state> self,
                             bus_config cfg) {
  self->state.cfg = cfg;
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    auto gone = [&](const bus_subscriber& x) {
      return x.member.address() == dm.source;
    };
    st.members.erase(
      std::remove_if(st.members.begin(), st.members.end(), gone),
      st.members.end());
    st.done.erase(std::remove_if(st.done.begin(), st.done.end(),
                                 [&](const caf::actor& x) {
                                   return x.address() == dm.source;
                                 }),
                  st.done.end());
    for (auto& [topic, subs] : st.topics)
      subs.erase(std::remove_if(subs.begin(), subs.end(),
                                [&](const bus_subscriber& x) {
                                  return x.member.address() == dm.source;
                                }),
                 subs.end());
    check_all_done(self);
  });
  return {
    [=](join_atom, std::uint32_t node, role_set,
        const caf::actor& member, const std::vector<std::string>& topics)
      -> std::vector<finish> {
      self->monitor(member);
      self->state.members.push_back(bus_subscriber{node, member});
      for (auto& topic : topics)
        add_subscriber(self, topic, node, member);
      // A node that joins a finished run learns it at once.
      if (self->state.finished)
        return {*self->state.finished};
      return {};
    },
    [=](subscribe_atom, const std::string& topic, std::uint32_t node,
        const caf::actor& member) {
      self->monitor(member);
      add_subscriber(self, topic, node, member);
    },
    [=](publish_atom, const std::string& topic, std::uint32_t sender,
        const caf::message& msg) {
      auto& st = self->state;
      auto i = st.topics.find(topic);
      if (i == st.topics.end() || i->second.empty()) {
        auto& q = st.held[topic];
        q.emplace_back(sender, msg);
        if (q.size() > st.cfg.max_held_per_topic) {
          q.pop_front();
          if (++st.held_dropped % 1024 == 1)
            log::warning(sender, "bus: no subscriber for topic '" + topic
                                   + "', dropped the oldest held message");
        }
        return;
      }
      // The same caf::message goes to every receiver: nothing is copied.
      for (auto& sub : i->second)
        if (sub.node != sender)
          caf::anon_send(sub.member, msg);
    },
    [=](done_atom, std::uint32_t, const caf::actor& member) {
      auto& st = self->state;
      if (std::find(st.done.begin(), st.done.end(), member) == st.done.end())
        st.done.push_back(member);
      check_all_done(self);
    },
    [=](const finish& x) {
      auto& st = self->state;
      if (st.finished)
        return;
      st.finished = x;
      for (auto& m : st.members)
        if (m.node != x.sender)
          caf::anon_send(m.member, x);
    },
  };
}

} // namespace dice
