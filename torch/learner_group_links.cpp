// exchange_links: how the connections form and prove themselves (see
// learner_group_links.hpp for why; one step over them:
// learner_group_links_step.cpp).

#include "learner_group_links.hpp"

#include "dice/core/errc.hpp"
#include "dice/security/auth.hpp"

#include "learner_group_io.hpp"
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace dice::detail {

using link_io::io_all;
using link_io::remaining_ms;
using link_io::wait_for;

namespace {

using clock = std::chrono::steady_clock;

// "lgy": the links' protocol since the shared-memory offers after the
// proofs ("lgx" before them): ranks of both never link.
constexpr char hello_magic[8] = {'d', 'i', 'c', 'e', '-', 'l', 'g', 'y'};
constexpr std::size_t nonce_bytes = 32;
constexpr std::size_t mac_bytes = 32;

struct hello {
  char magic[8];
  std::uint64_t generation;
  std::uint32_t from;
  std::uint32_t to;
  char nonce[nonce_bytes];
};

void tune(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // As Gloo asks for its pairs (the kernel caps it at {w,r}mem_max): a
  // large gradient goes out without waiting for the reader.
  int big = 32 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
}

std::string be(std::uint64_t x, int bytes) {
  std::string result(static_cast<std::size_t>(bytes), '\0');
  for (int i = bytes - 1; i >= 0; --i, x >>= 8)
    result[static_cast<std::size_t>(i)] = static_cast<char>(x & 0xFF);
  return result;
}

// What `from` proves to `to` over their connection: both nonces are fresh,
// so neither a proof of another connection nor one replayed from an earlier
// generation passes.
std::string link_mac(const learner_group_config& cfg, int from, int to,
                     const char* nonce_c, const char* nonce_a) {
  return hmac_sha256(cfg.secret,
                     {"dice-lg link", be(cfg.generation, 8), be(from, 4),
                      be(to, 4), std::string_view{nonce_c, nonce_bytes},
                      std::string_view{nonce_a, nonce_bytes}});
}

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
  int release() {
    auto x = fd;
    fd = -1;
    return x;
  }
};

// A listening socket on `address` (any free port).
int listen_on(const std::string& address, std::uint16_t& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), "0", &hints, &res) != 0 || !res)
    return -1;
  fd_guard fd{::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  auto ok = fd.fd >= 0 && ::bind(fd.fd, res->ai_addr, res->ai_addrlen) == 0
    && ::listen(fd.fd, 16) == 0;
  ::freeaddrinfo(res);
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (!ok || ::getsockname(fd.fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return -1;
  port = ntohs(sa.ss_family == AF_INET6
                 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                 : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  ::fcntl(fd.fd, F_SETFL, ::fcntl(fd.fd, F_GETFL) | O_NONBLOCK);
  return fd.release();
}

int connect_to(const std::string& host, std::uint16_t port,
               clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res)
        != 0
      || !res)
    return -1;
  fd_guard fd{::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (fd.fd >= 0)
    tune(fd.fd);
  auto rc = fd.fd < 0 ? -1 : ::connect(fd.fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0 && (fd.fd < 0 || errno != EINPROGRESS))
    return -1;
  if (rc != 0) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (!wait_for(fd.fd, POLLOUT, deadline)
        || ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0
        || err != 0)
      return -1;
  }
  return fd.release();
}

} // namespace

namespace link_io {

int remaining_ms(clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - clock::now())
                .count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    auto rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0)
      return true;
    if (rc == 0 || errno != EINTR)
      return false;
  }
}

bool io_all(int fd, void* p, std::size_t n, bool write,
            clock::time_point deadline) {
  auto c = static_cast<char*>(p);
  while (n > 0) {
    auto k = write ? ::send(fd, c, n, MSG_NOSIGNAL) : ::recv(fd, c, n, 0);
    if (k > 0) {
      c += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EINTR))
      return false;
    if (errno == EAGAIN && !wait_for(fd, write ? POLLOUT : POLLIN, deadline))
      return false;
  }
  return true;
}

} // namespace link_io

exchange_links::exchange_links(int rank, int size)
  : rank_(rank), fds_(static_cast<std::size_t>(size), -1),
    shm_(static_cast<std::size_t>(size)) {}

exchange_links::~exchange_links() {
  for (auto fd : fds_)
    if (fd >= 0)
      ::close(fd);
}

void exchange_links::shut() noexcept {
  shut_ = true;
  for (auto fd : fds_)
    if (fd >= 0)
      ::shutdown(fd, SHUT_RDWR);
}

caf::expected<links_ptr>
exchange_links::connect(const learner_group_config& cfg,
                        const publish_fn& publish, const lookup_fn& lookup,
                        const std::string& where) {
  auto deadline = clock::now() + cfg.join_timeout;
  auto self = cfg.rank;
  links_ptr result{new exchange_links(self, cfg.size)};
  auto failed = [&](errc code, const std::string& what) {
    return make_error(code, where + ": exchange links: " + what);
  };
  std::uint16_t port = 0;
  fd_guard listener{self + 1 < cfg.size ? listen_on(cfg.address, port) : -1};
  if (self + 1 < cfg.size && listener.fd < 0)
    return failed(errc::unreachable, "cannot listen on " + cfg.address);
  if (listener.fd >= 0)
    publish("links/" + std::to_string(self),
            cfg.address + " " + std::to_string(port));
  auto proving = !cfg.secret.empty();
  // Lower ranks: connect, say who we are, check their proof, give ours.
  for (int p = 0; p < self; ++p) {
    auto where_to = lookup("links/" + std::to_string(p));
    auto space = where_to.rfind(' ');
    if (space == std::string::npos)
      return failed(errc::handshake_failed,
                    "bad address of rank " + std::to_string(p));
    auto peer_port = static_cast<std::uint16_t>(
      std::stoul(where_to.substr(space + 1)));
    fd_guard fd{connect_to(where_to.substr(0, space), peer_port, deadline)};
    if (fd.fd < 0)
      return failed(errc::unreachable,
                    "cannot connect to rank " + std::to_string(p));
    hello h{};
    std::memcpy(h.magic, hello_magic, sizeof(h.magic));
    h.generation = cfg.generation;
    h.from = static_cast<std::uint32_t>(self);
    h.to = static_cast<std::uint32_t>(p);
    auto nonce = random_nonce(nonce_bytes);
    std::memcpy(h.nonce, nonce.data(), nonce_bytes);
    if (!io_all(fd.fd, &h, sizeof(h), true, deadline))
      return failed(errc::unreachable,
                    "rank " + std::to_string(p) + " closed the link");
    if (proving) {
      char answer[nonce_bytes + mac_bytes];
      if (!io_all(fd.fd, answer, sizeof(answer), false, deadline))
        return failed(errc::handshake_failed,
                      "rank " + std::to_string(p) + " did not prove itself");
      if (!same_mac(std::string{answer + nonce_bytes, mac_bytes},
                    link_mac(cfg, p, self, h.nonce, answer)))
        return failed(errc::handshake_failed,
                      "the listener of rank " + std::to_string(p)
                        + " does not hold the cluster secret");
      auto mine = link_mac(cfg, self, p, h.nonce, answer);
      if (!io_all(fd.fd, mine.data(), mine.size(), true, deadline))
        return failed(errc::unreachable,
                      "rank " + std::to_string(p) + " closed the link");
    }
    result->fds_[static_cast<std::size_t>(p)] = fd.release();
  }
  // Higher ranks: accept until each has proven itself; whoever else comes
  // (a stranger first in the queue, a wrong claim) is closed and skipped.
  auto missing = cfg.size - 1 - self;
  while (missing > 0) {
    if (!wait_for(listener.fd, POLLIN, deadline))
      return failed(errc::timeout,
                    std::to_string(missing) + " higher rank(s) never linked");
    fd_guard fd{::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC)};
    if (fd.fd < 0)
      continue;
    tune(fd.fd);
    // A stranger gets at most a second of this rank's time per try.
    auto until = std::min(deadline, clock::now() + std::chrono::seconds{1});
    hello h{};
    if (!io_all(fd.fd, &h, sizeof(h), false, until)
        || std::memcmp(h.magic, hello_magic, sizeof(h.magic)) != 0
        || h.generation != cfg.generation
        || h.to != static_cast<std::uint32_t>(self)
        || h.from >= static_cast<std::uint32_t>(cfg.size)
        || h.from <= static_cast<std::uint32_t>(self)
        || result->fds_[h.from] >= 0)
      continue;
    if (proving) {
      auto nonce = random_nonce(nonce_bytes);
      auto from = static_cast<int>(h.from);
      auto mac = link_mac(cfg, self, from, h.nonce, nonce.data());
      auto answer = nonce + mac;
      char theirs[mac_bytes];
      if (!io_all(fd.fd, answer.data(), answer.size(), true, until)
          || !io_all(fd.fd, theirs, sizeof(theirs), false, until)
          || !same_mac(std::string{theirs, mac_bytes},
                       link_mac(cfg, from, self, h.nonce, nonce.data())))
        continue;
    }
    result->fds_[h.from] = fd.release();
    --missing;
  }
  bool broke = false;
  result->shm_ = share_memory(result->fds_, cfg.shared_memory, deadline, broke);
  if (broke)
    return failed(errc::unreachable,
                  "a peer closed its link while offering shared memory");
  return result;
}

} // namespace dice::detail
