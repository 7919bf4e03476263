// remote_bench --ack socket: each collector answers a snapshot with one
// datagram {node, version} to the learner's loopback UDP port, the way raw
// TCP's baseline answers with one byte on its own socket. With --ack dice
// (the default) the ack is a dice publish back through both routers and
// BASP, which is a second snapshot-sized trip of actor hops per round; the
// socket ack times the delivery alone.

#include "loopback.hpp"
#include "remote_bench.hpp"
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

namespace dice::bench::remote {

namespace {

struct ack_wire {
  std::uint32_t node;
  std::uint32_t pad;
  std::uint64_t version;
};

} // namespace

ack_receiver::ack_receiver() {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto addr = loopback_address(0);
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0
      || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close();
    return;
  }
  port_ = ntohs(addr.sin_port);
}

ack_receiver::~ack_receiver() {
  close();
}

void ack_receiver::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

bool ack_receiver::wait(std::uint64_t version, long n,
                        std::chrono::seconds within) {
  timeval tv{static_cast<time_t>(within.count()), 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  long acks = 0;
  while (acks < n) {
    ack_wire x{};
    auto k = ::recv(fd_, &x, sizeof(x), 0);
    if (k != static_cast<long>(sizeof(x)))
      return false; // a timeout (or a stray datagram: the round fails)
    if (x.version == version)
      ++acks;
  }
  return true;
}

int ack_sender(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto addr = loopback_address(port);
  if (fd >= 0
      && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    fd = -1;
  }
  return fd;
}

void send_ack(int fd, std::uint32_t node, std::uint64_t version) {
  ack_wire x{node, 0, version};
  // Lost only if the learner is gone; it then fails the round anyway.
  (void)::send(fd, &x, sizeof(x), 0);
}

} // namespace dice::bench::remote
