// The role actor's node_services: what middleware may do (topics, loaders,
// timers, report counters) and how values on topics reach its handlers.

#include "dice/logging/log.hpp"
#include "dice/security/trust.hpp"

#include "caf/actor_cast.hpp"
#include "caf/scheduled_actor.hpp"

#include "role_state.hpp"

#include <algorithm>

namespace dice {

std::uint32_t role_state::node_id() const {
  return cfg.node;
}

role_set role_state::roles() const {
  return cfg.roles;
}

std::uint64_t role_state::incarnation() const {
  return cfg.incarnation;
}

caf::actor_clock::time_point role_state::now() const {
  return self->clock().now();
}

bool role_state::finished() const {
  return finishing;
}

bool role_state::failing() const {
  return rep.failed;
}

void role_state::request_finish(std::string reason) {
  on_finish(finish{cfg.node, std::move(reason), false}, true);
}

void role_state::add_to_report(report_counter c, std::int64_t n) {
  switch (c) {
    case report_counter::trajectories_received:
      rep.trajectories_received += n;
      break;
    case report_counter::deltas_received: rep.deltas_received += n; break;
    case report_counter::models_loaded: rep.models_loaded += n; break;
    case report_counter::models_sent: rep.models_sent += n; break;
    case report_counter::models_dropped: rep.models_dropped += n; break;
  }
}

void role_state::add_flush_target(caf::actor worker) {
  if (worker
      && std::find(flush_targets.begin(), flush_targets.end(), worker)
        == flush_targets.end()) {
    // A loader that dies takes what it holds with it: noticed, not silent.
    self->monitor(worker);
    flush_targets.push_back(std::move(worker));
  }
}

void role_state::flush_before_done(const storage_loader_actor& loader) {
  add_flush_target(caf::actor_cast<caf::actor>(loader));
}

void role_state::flush_before_done(const model_loader_actor& loader) {
  add_flush_target(caf::actor_cast<caf::actor>(loader));
}

// The loader publishes the reference on the router in this node's name, so
// it gets the router too; it is flushed before this node's finish.
void role_state::store(const storage_loader_actor& loader, context_delta x,
                       std::vector<std::string> topics) {
  if (loader)
    self->send(loader, save_atom::value, std::move(x),
               caf::actor_cast<caf::actor>(cfg.router), std::move(topics));
}

void role_state::store(const model_loader_actor& loader, model_snapshot x,
                       std::vector<std::string> topics) {
  if (loader)
    self->send(loader, save_atom::value, std::move(x),
               caf::actor_cast<caf::actor>(cfg.router), std::move(topics));
}

void role_state::load(const storage_loader_actor& loader,
                      const storage_ref& ref, const std::string& topic) {
  start_load(caf::actor_cast<caf::actor>(loader), ref, topic);
}

void role_state::load(const model_loader_actor& loader, const storage_ref& ref,
                      const std::string& topic) {
  start_load(caf::actor_cast<caf::actor>(loader), ref, topic);
}

void role_state::start_load(const caf::actor& loader, const storage_ref& ref,
                            const std::string& topic) {
  ++pending_loads;
  // The loader sends (topic, item) to this actor before it answers, so the
  // item is dispatched before the answer arrives.
  self
    ->request(loader, cfg.load_timeout, load_atom::value, ref,
              caf::actor_cast<caf::actor>(self), topic)
    .then(
      [this](bool) {
        load_done();
      },
      [this, path = ref.path](caf::error& err) {
        log::warning(cfg.node,
                     "no answer to a load of " + path + ": " + render(err));
        load_done();
      });
}

void role_state::quit_when(std::function<bool()> settled) {
  quit_conditions.push_back(std::move(settled));
}

void role_state::schedule(caf::timespan delay, std::function<void()> fn) {
  auto id = ++timer_id;
  timers.emplace(id, std::move(fn));
  self->delayed_send(self, delay, timer_atom::value, id);
}

void role_state::on_peer_event(peer_handler fn) {
  peer_handlers.push_back(std::move(fn));
}

std::string role_state::spool_dir() const {
  return cfg.spool_dir;
}

bool role_state::spool_fsync() const {
  return cfg.spool_fsync;
}

std::string role_state::spool_key() const {
  return cfg.spool_key;
}

// -- topics -------------------------------------------------------------------

void role_state::subscribe_erased(const std::string& topic, erased_handler fn) {
  auto& hs = handlers[topic];
  hs.push_back(std::move(fn));
  // Before joining, subscriptions travel with the join request.
  if (joined && hs.size() == 1)
    self->send(cfg.router, subscribe_atom::value, topic, cfg.node,
               caf::actor_cast<caf::actor>(self));
}

void role_state::publish_erased(const std::string& topic, caf::message msg) {
  self->send(cfg.router, publish_atom::value, topic, cfg.node, std::move(msg));
}

void role_state::dispatch(const std::string& topic,
                          const detail::topic_value& x) {
  auto i = handlers.find(topic);
  if (i == handlers.end()) {
    // Nobody here asked for it: a confused or hostile sender; count it so
    // that it is visible, and keep running.
    count(trust_event::unknown_topic);
    log::debug(cfg.node, "ignored a message on unsubscribed topic {}", topic);
    return;
  }
  bool taken = false;
  try {
    for (auto& fn : i->second)
      taken |= fn(x);
  } catch (const std::exception& e) {
    taken = true;
    log::error(cfg.node, "handler for topic " + topic + " threw: " + e.what());
  }
  if (!taken) {
    // A type no handler of the topic takes: refused, visibly.
    count(trust_event::message_rejected);
    log::debug(cfg.node, "ignored a value of another type on topic {}", topic);
  }
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  maybe_quit();
}

void role_state::on_peer(const peer_event& x) {
  for (auto& fn : peer_handlers) {
    try {
      fn(x);
    } catch (const std::exception& e) {
      log::error(cfg.node,
                 std::string{"peer event handler threw: "} + e.what());
    }
  }
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  maybe_quit();
}

void role_state::on_timer(std::uint64_t id) {
  auto i = timers.find(id);
  if (i == timers.end())
    return;
  auto fn = std::move(i->second);
  timers.erase(i);
  if (quitted)
    return;
  try {
    fn();
  } catch (const std::exception& e) {
    log::error(cfg.node, std::string{"timer handler threw: "} + e.what());
  }
  if (pending && pending->ready && pending->ready())
    resume(wait_outcome::ready);
  maybe_quit();
}

} // namespace dice
