#pragma once

// SIGINT and SIGTERM as a graceful stop. The first of them calls every
// registered callback (on a watcher thread, never inside the handler: a
// handler may only write to a pipe); node::run and run_local register one
// that finishes the run the way a learner's max_env_steps does, so
// unacknowledged context is delivered, checkpoints and summaries are
// written and the process exits 0. A second signal takes the signal's
// default action at once (the process dies as it did before).

#include "caf/actor.hpp"

#include <cstdint>
#include <functional>
#include <memory>

namespace dice {

/// Installs the SIGINT and SIGTERM handlers (once per process) and calls
/// `fn(signal)` on the watcher thread when the first of them arrives, or
/// at once if one already did; the callback is forgotten when the returned
/// handle is destroyed.
std::shared_ptr<void> on_stop_signal(std::function<void(int)> fn);

/// on_stop_signal with a callback that sends `to` (a scoped actor waiting
/// on the run) `finish{node, "SIGTERM" or "SIGINT", not failed}`, which it
/// hands to the role actor that finishes.
std::shared_ptr<void> finish_on_stop_signal(const caf::actor& to,
                                            std::uint32_t node);

/// The first SIGINT or SIGTERM this process received since the handlers
/// were installed (0: none).
int stop_signal_received() noexcept;

} // namespace dice
