#pragma once

#include "dice/pipeline/context.hpp"
#include "dice/pipeline/node_services.hpp"

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
