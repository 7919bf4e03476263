#pragma once

// The raw-TCP baselines of the benchmarks (connect_bench, remote_bench,
// allreduce_bench) listen on an ephemeral loopback port.

#include "dice/process/unique_fd.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

namespace dice::bench {

/// 127.0.0.1:`port`.
inline sockaddr_in loopback_address(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

/// A socket listening on 127.0.0.1 at a port the kernel picks; the port is
/// written to `port`. -1 if any step fails.
inline int listen_loopback(int backlog, std::uint16_t& port) {
  dice::unique_fd ls{::socket(AF_INET, SOCK_STREAM, 0)};
  if (!ls)
    return -1;
  auto addr = loopback_address(0);
  socklen_t len = sizeof(addr);
  if (::bind(ls.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::getsockname(ls.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0
      || ::listen(ls.get(), backlog) != 0)
    return -1;
  port = ntohs(addr.sin_port);
  // A plain int for the benchmarks' C-style socket code (which may fork):
  // the caller owns it from here.
  return ls.release();
}

} // namespace dice::bench
