// The raw-TCP side of allreduce_bench: the control channel's reads and
// writes and the baseline's socket settings.

#include "allreduce_bench.hpp"
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dice::bench::allreduce {

bool send_all(int fd, const void* p, std::size_t n) {
  auto c = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::write(fd, c, n);
    if (k <= 0)
      return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* p, std::size_t n) {
  auto c = static_cast<char*>(p);
  while (n > 0) {
    auto k = ::read(fd, c, n);
    if (k <= 0)
      return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // As large as Gloo asks for its pairs (it requests 32 MiB; the kernel caps
  // both at net.core.{w,r}mem_max), so the baseline is not handicapped.
  int big = 32 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
}

} // namespace dice::bench::allreduce
