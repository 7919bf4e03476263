#include "net/socket.hpp"

#include "dice/core/errc.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace dice::net {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// "host:port" of a socket address ("[v6]:port" for IPv6).
std::string render(const sockaddr_storage& ss, std::uint16_t* port_out,
                   bool* loopback_out) {
  char host[INET6_ADDRSTRLEN] = {0};
  std::uint16_t port = 0;
  bool loopback = false;
  std::string result;
  if (ss.ss_family == AF_INET) {
    auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
    port = ntohs(a.sin_port);
    loopback = (ntohl(a.sin_addr.s_addr) >> 24) == 127;
    result = std::string{host} + ":" + std::to_string(port);
  } else if (ss.ss_family == AF_INET6) {
    auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof(host));
    port = ntohs(a.sin6_port);
    loopback = IN6_IS_ADDR_LOOPBACK(&a.sin6_addr)
      || (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr) && a.sin6_addr.s6_addr[12] == 127);
    result = "[" + std::string{host} + "]:" + std::to_string(port);
  }
  if (port_out)
    *port_out = port;
  if (loopback_out)
    *loopback_out = loopback;
  return result;
}

struct addrinfo_deleter {
  void operator()(addrinfo* x) const {
    ::freeaddrinfo(x);
  }
};

using addrinfo_ptr = std::unique_ptr<addrinfo, addrinfo_deleter>;

caf::expected<addrinfo_ptr> resolve(const std::string& host, std::uint16_t port,
                                    bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  auto port_str = std::to_string(port);
  if (auto rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
      rc != 0)
    return make_error(errc::unreachable,
                      "cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return addrinfo_ptr{res};
}

int left_ms(deadline_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    deadline - deadline_clock::now());
  return static_cast<int>(std::max<long long>(0, left.count()));
}

// Waits for `events` on `fd` until `deadline`: true if ready.
bool wait_for(int fd, short events, deadline_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    auto ms = left_ms(deadline);
    auto rc = ::poll(&p, 1, ms);
    if (rc > 0)
      return true;
    if (rc == 0 || (rc < 0 && errno != EINTR))
      return false;
  }
}

} // namespace

caf::expected<unique_fd> listen_tcp(const std::string& host,
                                    std::uint16_t port) {
  auto where = (host.empty() ? std::string{"*"} : host) + ":"
    + std::to_string(port);
  // None (errno set) on failure; unique_fd keeps errno when it closes.
  auto bind_listen = [&](int family, const sockaddr* addr, socklen_t len) {
    unique_fd fd{
      ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
    if (!fd)
      return fd;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6 && host.empty()) {
      int zero = 0; // dual stack: IPv4 too
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd.get(), addr, len) != 0 || ::listen(fd.get(), SOMAXCONN) != 0)
      fd.reset();
    return fd;
  };
  if (host.empty()) {
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(port);
    auto fd = bind_listen(AF_INET6, reinterpret_cast<sockaddr*>(&a6),
                          sizeof(a6));
    if (fd)
      return fd;
    sockaddr_in a4{};
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons(port);
    fd = bind_listen(AF_INET, reinterpret_cast<sockaddr*>(&a4), sizeof(a4));
    if (fd)
      return fd;
    return make_error(errc::unreachable,
                      "cannot listen on " + where + ": " + errno_text());
  }
  auto res = resolve(host, port, true);
  if (!res)
    return res.error();
  std::string why = "no address";
  for (auto* ai = res->get(); ai != nullptr; ai = ai->ai_next) {
    auto fd = bind_listen(ai->ai_family, ai->ai_addr, ai->ai_addrlen);
    if (fd)
      return fd;
    why = errno_text();
  }
  return make_error(errc::unreachable,
                    "cannot listen on " + where + ": " + why);
}

local_address local_endpoint(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  local_address result;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    result.address = render(ss, &result.port, &result.loopback);
  return result;
}

std::optional<accepted> accept_nonblocking(int listen_fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  unique_fd fd{::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC)};
  if (!fd)
    return std::nullopt;
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return accepted{std::move(fd), render(ss, nullptr, nullptr)};
}

bool send_some(int fd, std::string& buf) {
  while (!buf.empty()) {
    auto n = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n > 0) {
      buf.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

caf::expected<unique_fd> connect_tcp(const std::string& host,
                                     std::uint16_t port,
                                     deadline_clock::time_point deadline) {
  auto where = host + ":" + std::to_string(port);
  auto res = resolve(host, port, false);
  if (!res)
    return res.error();
  std::string why = "no address";
  for (auto* ai = res->get(); ai != nullptr; ai = ai->ai_next) {
    unique_fd fd{
      ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
    if (!fd) {
      why = errno_text();
      continue;
    }
    auto rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_for(fd.get(), POLLOUT, deadline))
        return make_error(errc::timeout,
                          "connecting to " + where + " timed out");
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    why = errno_text();
  }
  return make_error(errc::unreachable,
                    "cannot connect to " + where + ": " + why);
}

std::optional<unique_fd> start_connect(const std::string& host,
                                       std::uint16_t port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto& a4 = reinterpret_cast<sockaddr_in&>(ss);
  auto& a6 = reinterpret_cast<sockaddr_in6&>(ss);
  if (::inet_pton(AF_INET, host.c_str(), &a4.sin_addr) == 1) {
    a4.sin_family = AF_INET;
    a4.sin_port = htons(port);
    len = sizeof(a4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &a6.sin6_addr) == 1) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(port);
    len = sizeof(a6);
  } else {
    return std::nullopt;
  }
  unique_fd fd{
    ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (!fd)
    return std::nullopt;
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0
      && errno != EINPROGRESS)
    return std::nullopt;
  return fd;
}

bool connected_now(int fd) {
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || (p.revents & (POLLERR | POLLHUP)) != 0)
    return false;
  int err = 0;
  socklen_t len = sizeof(err);
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

caf::error finish_connect(int fd, const std::string& where,
                          deadline_clock::time_point deadline) {
  if (!wait_for(fd, POLLOUT, deadline))
    return make_error(errc::timeout, "connecting to " + where + " timed out");
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err == 0)
    return caf::none;
  return make_error(errc::unreachable,
                    "cannot connect to " + where + ": " + std::strerror(err));
}

caf::error send_all(int fd, const std::string& bytes,
                    deadline_clock::time_point deadline) {
  std::string rest = bytes;
  while (!rest.empty()) {
    if (!send_some(fd, rest))
      return make_error(errc::unreachable, "connection lost: " + errno_text());
    if (!rest.empty() && !wait_for(fd, POLLOUT, deadline))
      return make_error(errc::timeout, "sending timed out");
  }
  return caf::none;
}

caf::expected<std::string> recv_exactly(int fd, std::size_t n,
                                        deadline_clock::time_point deadline) {
  std::string result(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    auto k = ::recv(fd, &result[got], n - got, 0);
    if (k > 0) {
      got += static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0)
      return make_error(errc::unreachable, "connection closed by the peer");
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return make_error(errc::unreachable, "connection lost: " + errno_text());
    if (!wait_for(fd, POLLIN, deadline))
      return make_error(errc::timeout, "no answer in time");
  }
  return result;
}

} // namespace dice::net
