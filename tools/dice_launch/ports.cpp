// The launcher binds every node's port before it starts any node, and
// hands each node its listening socket as fd 3 (--dice.listen-fd=3): the
// nodes start at once instead of one after another (each used to wait for
// the previous node's "listening on port" line), and a node that dials a
// peer still loading LibTorch is queued in that peer's backlog instead of
// being refused and retried after a backoff.

#include "launch.hpp"
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace dice_launch {

dice::unique_fd listen_on(const std::string& host, std::uint16_t port,
                          std::uint16_t& bound, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto service = std::to_string(port);
  if (auto rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                              service.c_str(), &hints, &res);
      rc != 0) {
    why = ::gai_strerror(rc);
    return {};
  }
  dice::unique_fd fd;
  for (auto* ai = res; ai != nullptr && !fd; ai = ai->ai_next) {
    fd.reset(::socket(ai->ai_family,
                      ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      ai->ai_protocol));
    if (!fd)
      continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0
        || ::listen(fd.get(), SOMAXCONN) != 0) {
      why = std::strerror(errno);
      fd.reset();
    }
  }
  ::freeaddrinfo(res);
  if (!fd)
    return {};
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len);
  bound = ntohs(local.ss_family == AF_INET6
                  ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                  : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  return fd;
}

} // namespace dice_launch
