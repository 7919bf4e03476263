#pragma once

#include "dice/core/role.hpp"
#include "dice/messages/event.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/pipeline/loaders.hpp"
#include "dice/pipeline/topic.hpp"

#include "caf/actor_clock.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"
#include "caf/timespan.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dice {

/// A counter of the node's report (node_report) that middleware adds to.
enum class report_counter : std::uint8_t {
  /// node_report::trajectories_received.
  trajectories_received,
  /// node_report::deltas_received.
  deltas_received,
  /// node_report::models_loaded.
  models_loaded,
  /// node_report::models_sent.
  models_sent,
  /// node_report::models_dropped.
  models_dropped,
};

/// What a role actor offers to the middleware it runs: its identity, typed
/// topics, its clock and timers, loaders, and the few counters middleware
/// reports. Nothing else of the actor (no actor system, no actor handles, no
/// report to write into) is reachable from here.
class node_services {
 public:
  virtual ~node_services();

  /// This node's id.
  virtual std::uint32_t node_id() const = 0;

  /// This node's roles.
  virtual role_set roles() const = 0;

  /// This node's incarnation: differs after a restart.
  virtual std::uint64_t incarnation() const = 0;

  /// Every value on `t` from another node (or a loader of this one) goes to
  /// `fn`, once (DI-engine's `task.on`). Values of another type on the same
  /// topic name are not `fn`'s: if no handler of the topic takes them, they
  /// are counted (trust_event::message_rejected) and dropped.
  template <class T, class F>
  void on(const topic<T>& t, F fn) {
    subscribe_erased(t.name(),
                     [fn = std::move(fn)](const detail::topic_value& x) {
                       if (auto ptr = x.get<T>()) {
                         fn(*ptr);
                         return true;
                       }
                       return false;
                     });
  }

  /// Sends `value` on `t` to every other node subscribed to it
  /// (DI-engine's `task.emit(..., only_remote=True)`).
  template <class T>
  void emit(const topic<T>& t, T value) {
    if constexpr (travels_unwrapped<T>::value)
      publish_erased(t.name(), caf::make_message(t.name(), std::move(value)));
    else
      publish_erased(t.name(),
                     caf::make_message(
                       t.name(),
                       event{node_id(), caf::make_message(std::move(value))}));
  }

  /// The actor clock's now (a fake clock under test).
  virtual caf::actor_clock::time_point now() const = 0;

  /// True once the cluster has finished.
  virtual bool finished() const = 0;

  /// True when this node's run ends with an error (node_report::failed).
  virtual bool failing() const = 0;

  /// Ends the run after the current iteration (e.g. a stop value reached).
  virtual void request_finish(std::string reason) = 0;

  /// Adds `n` to a counter of the node's report.
  virtual void add_to_report(report_counter c, std::int64_t n = 1) = 0;

  /// Work a node hands to a loader (which stores and then publishes) must
  /// reach the router before the node's finish and done: when the node stops
  /// it asks each such loader to flush, and only then tells the router (so
  /// peers get the node's last data before its finish).
  virtual void flush_before_done(const storage_loader_actor& loader) = 0;

  /// Same for a model loader.
  virtual void flush_before_done(const model_loader_actor& loader) = 0;

  /// Asks `loader` to store `x` and publish its storage_ref on each of
  /// `topics` (DI-engine's `storage_loader.save`), in this node's name.
  virtual void store(const storage_loader_actor& loader, context_delta x,
                     std::vector<std::string> topics)
    = 0;

  /// Same for a model loader and a snapshot.
  virtual void store(const model_loader_actor& loader, model_snapshot x,
                     std::vector<std::string> topics)
    = 0;

  /// Asks `loader` to read `ref` and hand the delta to the handlers of
  /// `topic` like a message from the router. Until the loader answered (or
  /// `role_config::load_timeout` passed), a finish does not end the current
  /// wait and the node does not quit: what a peer stored before its finish
  /// is still merged.
  virtual void load(const storage_loader_actor& loader, const storage_ref& ref,
                    const std::string& topic)
    = 0;

  /// Same for a model loader (the handlers get a model_snapshot).
  virtual void load(const model_loader_actor& loader, const storage_ref& ref,
                    const std::string& topic)
    = 0;

  /// After the router released this node, it quits only once `settled()`
  /// holds (checked after every message; at most `drain_timeout` after the
  /// node stopped), e.g. until a learner acknowledged every delta: its
  /// storage loader removes what it stored when the node quits.
  virtual void quit_when(std::function<bool()> settled) = 0;

  /// Runs `fn` on the role actor after `delay` (the actor clock: a fake
  /// one in tests); a timer that fires after the node stopped does nothing.
  virtual void schedule(caf::timespan delay, std::function<void()> fn) = 0;

  /// Handler for what the router says about peers.
  using peer_handler = std::function<void(const peer_event&)>;

  /// `fn` hears every peer_event this node's router sends (a peer connected or
  /// was lost).
  virtual void on_peer_event(peer_handler fn) = 0;

  /// Directory where a collector spools the context deltas no learner
  /// acknowledged yet, so a later incarnation of this node republishes
  /// them (--dice.spool-dir; empty: no spool).
  virtual std::string spool_dir() const {
    return {};
  }

  /// Spool writes are flushed to disk (--dice.spool-fsync).
  virtual bool spool_fsync() const {
    return false;
  }

  /// Key the spool authenticates its records with, from the cluster secret
  /// (empty: no secret; records are checksummed only).
  virtual std::string spool_key() const {
    return {};
  }

 protected:
  /// Takes one value of a topic; false: not of the handler's type.
  using erased_handler = std::function<bool(const detail::topic_value&)>;

  /// Subscribes `fn` to the topic called `name` (on()).
  virtual void subscribe_erased(const std::string& name, erased_handler fn) = 0;

  /// Publishes `(name, content)` (emit()).
  virtual void publish_erased(const std::string& name, caf::message msg) = 0;
};

} // namespace dice
