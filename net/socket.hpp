#pragma once

// Plain POSIX TCP helpers for the preamble: bind/listen, accept, connect and
// byte transfer with deadlines. Sockets are non-blocking and close-on-exec;
// every wait is bounded.

#include "dice/process/unique_fd.hpp"

#include "caf/expected.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace dice::net {

/// The local side of a bound socket.
struct local_address {
  /// Bound port.
  std::uint16_t port = 0;
  /// True if the address is loopback only (127.0.0.0/8, ::1).
  bool loopback = false;
  /// "127.0.0.1:4242", "[::]:4242".
  std::string address;
};

/// Binds and listens on `host`:`port` ("" = every interface, IPv6 and
/// IPv4 where the system allows; port 0 = any free port), SO_REUSEADDR set.
caf::expected<unique_fd> listen_tcp(const std::string& host,
                                    std::uint16_t port);

/// Where `fd` is bound.
local_address local_endpoint(int fd);

/// An accepted connection.
struct accepted {
  /// Its socket (non-blocking, close-on-exec).
  unique_fd fd;
  /// The remote address, "host:port".
  std::string peer;
};

/// Accepts one pending connection (nullopt: none now, or an error in
/// errno).
std::optional<accepted> accept_nonblocking(int listen_fd);

/// Sends what it can of `buf` without blocking and drops it from `buf`;
/// false if the connection failed.
bool send_some(int fd, std::string& buf);

/// Clock of the deadlines below.
using deadline_clock = std::chrono::steady_clock;

/// Connects to `host`:`port` before `deadline` (every resolved address in
/// turn); a non-blocking socket.
caf::expected<unique_fd> connect_tcp(const std::string& host,
                                     std::uint16_t port,
                                     deadline_clock::time_point deadline);

/// Starts connecting to `host`:`port` without blocking, if `host` is a
/// numeric IPv4 or IPv6 address (nothing to resolve, so nothing that can
/// block); nullopt for a name, or if the connection failed at once (the
/// caller then uses connect_tcp, which says why). TCP_NODELAY is set. The
/// socket may still be connecting: finish_connect waits for it.
std::optional<unique_fd> start_connect(const std::string& host,
                                       std::uint16_t port);

/// True if `fd`, from start_connect, is connected now (without waiting).
bool connected_now(int fd);

/// Waits until `fd`, from start_connect, is connected, before `deadline`;
/// `where` names the peer in the error.
caf::error finish_connect(int fd, const std::string& where,
                          deadline_clock::time_point deadline);

/// Sends all of `bytes` before `deadline`.
caf::error send_all(int fd, const std::string& bytes,
                    deadline_clock::time_point deadline);

/// Reads exactly `n` bytes (never more) before `deadline`.
caf::expected<std::string> recv_exactly(int fd, std::size_t n,
                                        deadline_clock::time_point deadline);

} // namespace dice::net
