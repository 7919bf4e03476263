#pragma once

#include "dice/actors/model_loader.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/core/context.hpp"
#include "dice/core/role.hpp"
#include "dice/messages/event.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/runtime/topic.hpp"

#include "caf/actor.hpp"
#include "caf/actor_clock.hpp"
#include "caf/fwd.hpp"
#include "caf/make_message.hpp"
#include "caf/message.hpp"
#include "caf/timespan.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dice {

/// How a wait ended.
enum class wait_outcome : std::uint8_t {
  /// The awaited condition holds.
  ready,
  /// The deadline passed first.
  timed_out,
  /// The cluster finished first.
  finished,
};

struct wait_for;

/// What a before-part returns: go on (`proceed`) or wait.
using step = std::optional<wait_for>;

/// Go on with the next middleware.
inline constexpr std::nullopt_t proceed = std::nullopt;

/// A before-part that cannot go on yet. The role actor keeps handling
/// messages; after each one it checks `ready`. The wait ends when `ready`
/// holds, when `timeout` passes (a delayed message, on CAF's clock, so tests
/// use a fake one) or when the cluster finishes. Never a sleep loop.
struct wait_for {
  /// True when the awaited condition holds.
  std::function<bool()> ready;
  /// How long to wait at most.
  caf::timespan timeout;
  /// Runs once the wait ends; may return another wait to keep waiting.
  std::function<step(context&, wait_outcome)> resume;
};

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

 protected:
  /// Takes one value of a topic; false: not of the handler's type.
  using erased_handler = std::function<bool(const detail::topic_value&)>;

  /// Subscribes `fn` to the topic called `name` (on()).
  virtual void subscribe_erased(const std::string& name, erased_handler fn) = 0;

  /// Publishes `(name, content)` (emit()).
  virtual void publish_erased(const std::string& name, caf::message msg) = 0;
};

/// One stage of a pipeline (DI-engine's generator middleware): `before`
/// runs in registration order, `after` in reverse order once every later
/// stage has run. All parts are optional. Move-only: the parts usually
/// share a state (a shared_ptr they captured), and two role actors running
/// copies of one middleware would race on it.
struct middleware {
  /// An empty stage.
  middleware() = default;
  middleware(middleware&&) = default;
  middleware& operator=(middleware&&) = default;
  middleware(const middleware&) = delete;
  middleware& operator=(const middleware&) = delete;

  /// Name for logs.
  std::string name;
  /// Runs once when the role actor starts: subscribe to topics here.
  std::function<void(node_services&)> attach;
  /// The part before DI-engine's `yield`; may return a wait.
  std::function<step(context&)> before;
  /// The part after DI-engine's `yield`.
  std::function<void(context&)> after;
  /// Runs when the node stops, e.g. to merge what arrived meanwhile.
  std::function<void(context&)> on_stop;
};

/// Middleware that does nothing (DI-engine's `task.void()`).
middleware void_middleware(std::string name = "void");

/// An ordered list of middleware a role actor runs every iteration.
class pipeline {
 public:
  /// Appends a stage; returns *this for chaining.
  pipeline& use(middleware x) {
    stages_.push_back(std::move(x));
    return *this;
  }

  /// The stages in order.
  const std::vector<middleware>& stages() const noexcept {
    return stages_;
  }

  /// The stages in order (mutable).
  std::vector<middleware>& stages() noexcept {
    return stages_;
  }

 private:
  std::vector<middleware> stages_;
};

} // namespace dice
