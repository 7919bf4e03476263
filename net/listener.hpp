#pragma once

#include "dice/process/unique_fd.hpp"
#include "net/preamble.hpp"

#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dice::net {

/// Settings of a node's listening socket.
struct listener_config {
  /// The node's id (for log lines).
  std::uint32_t node = 0;
  /// Address to bind ("": every interface).
  std::string host;
  /// Port to bind (0: any free port).
  std::uint16_t port = 0;
  /// Cluster secret (empty: none).
  std::string secret;
  /// A connection that has not finished the preamble by then is closed.
  caf::timespan handshake_timeout = std::chrono::seconds{2};
  /// Most connections in the preamble at once; a new one past this closes
  /// the oldest that has not sent its whole hello, or if all have, the one
  /// owing its proof the longest (see docs/trust.md for why the oldest, not
  /// the newest; listener::victim for why the hello).
  std::size_t max_pending = 64;
  /// An inherited listening socket to adopt instead of binding host:port
  /// (-1: bind). dice-launch binds every node's port before it starts any
  /// node, so the nodes start at once and a peer's early connect waits in
  /// the backlog instead of being refused and retried later.
  int fd = -1;
};

/// Receives a socket that finished the preamble, and with `fd` its
/// ownership. `peer` is the remote address, for logs; `binding` the
/// preamble's nonces (preamble_acceptor::binding).
using handover_fn = std::function<void(unique_fd fd, channel ch,
                                       const std::string& peer,
                                       const std::string& binding)>;

/// A node's listening socket and the thread that runs the preamble on every
/// accepted connection (poll, non-blocking, no blocking call but the hand-
/// over). Strangers' bytes stop here: only a connection that finished the
/// preamble reaches `handover_fn`.
class listener {
 public:
  /// Binds and listens, or adopts `cfg.fd` (the thread starts with
  /// `start`).
  static caf::expected<std::unique_ptr<listener>> open(listener_config cfg,
                                                       handover_fn fn);

  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;

  /// Stops the thread and closes every socket.
  ~listener();

  /// The bound port.
  std::uint16_t port() const noexcept {
    return port_;
  }

  /// True if bound to a loopback address only.
  bool loopback() const noexcept {
    return loopback_;
  }

  /// The bound address, e.g. "127.0.0.1:4242" or "[::]:4242".
  const std::string& address() const noexcept {
    return address_;
  }

  /// Starts the thread.
  void start();

  /// Stops the thread (idempotent).
  void stop();

  /// Connections in the preamble right now.
  std::size_t pending() const noexcept {
    return pending_.load();
  }

 private:
  struct pending_conn;

  listener(listener_config cfg, handover_fn fn, unique_fd fd);

  void run();

  // Reads or writes what a connection in the preamble is ready for, and
  // hands it over once done; false: it is finished here (closed or handed
  // over).
  bool advance(pending_conn& c);

  // The connection to close at the cap (`conns` oldest first, not empty).
  static std::size_t victim(const std::deque<pending_conn>& conns);

  listener_config cfg_;
  handover_fn fn_;
  unique_fd fd_;
  // A pipe that wakes the thread's poll on stop.
  unique_fd wake_read_;
  unique_fd wake_write_;
  std::uint16_t port_ = 0;
  bool loopback_ = false;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> pending_{0};
  std::mutex stop_mtx_;
  std::thread thread_;
};

} // namespace dice::net
