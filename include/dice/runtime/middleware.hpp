#pragma once

#include "dice/core/context.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"

#include "caf/actor.hpp"
#include "caf/actor_clock.hpp"
#include "caf/fwd.hpp"
#include "caf/message.hpp"
#include "caf/timespan.hpp"
#include "caf/type_erased_tuple.hpp"

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

/// What a role actor offers to the middleware it runs.
class node_services {
 public:
  virtual ~node_services();

  /// This node's id.
  virtual std::uint32_t node_id() const = 0;

  /// This node's roles.
  virtual role_set roles() const = 0;

  /// This node's incarnation: differs after a restart.
  virtual std::uint64_t incarnation() const = 0;

  /// Handler for messages arriving on a topic; the content is `(topic, T)`.
  using handler = std::function<void(const caf::type_erased_tuple&)>;

  /// Subscribes to `topic`; every message on it goes to `fn`, once.
  virtual void subscribe(const std::string& topic, handler fn) = 0;

  /// Sends `(topic, content...)` to every other node subscribed to `topic`
  /// (DI-engine's `emit(..., only_remote=True)`).
  virtual void publish(const std::string& topic, caf::message msg) = 0;

  /// The actor clock's now (a fake clock under test).
  virtual caf::actor_clock::time_point now() const = 0;

  /// True once the cluster has finished.
  virtual bool finished() const = 0;

  /// Ends the run after the current iteration (e.g. a stop value reached).
  virtual void request_finish(std::string reason) = 0;

  /// Work a node hands to `worker` (e.g. a loader that stores and then
  /// publishes) must reach the router before the node's finish and done: when
  /// the node stops it asks each such worker to flush, and only then tells
  /// the router (so peers get the node's last data before its finish).
  virtual void flush_before_done(caf::actor worker) = 0;

  /// Asks `loader` (a storage or model loader) to read `ref` and send
  /// `(topic, item)` back, where the topic's handlers get it like a message
  /// from the router. Until the loader answered (or `role_config::load_timeout`
  /// passed), a finish does not end the current wait and the node does not
  /// quit: what a peer stored before its finish is still merged.
  virtual void load(const caf::actor& loader, const storage_ref& ref,
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

  /// The role actor itself (a worker sends what it loaded here).
  virtual caf::actor handle() = 0;

  /// The node's router (a worker publishes what it stored there).
  virtual caf::actor router_handle() = 0;

  /// Counters reported at the end of the run.
  virtual node_report& report() = 0;

  /// The actor system the node runs in.
  virtual caf::actor_system& system() = 0;

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
};

/// One stage of a pipeline (DI-engine's generator middleware): `before`
/// runs in registration order, `after` in reverse order once every later
/// stage has run. All parts are optional.
struct middleware {
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
