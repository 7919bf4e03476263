// Bytes this process moved over its TCP sockets, from the kernel's own
// counters (TCP_INFO), so a figure counts every byte on the wire: BASP,
// data connections and the same-host references alike. Alone in its file:
// <linux/tcp.h> (which has the byte counters) clashes with <netinet/tcp.h>.

#include "remote_bench.hpp"
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>

namespace dice::bench::remote {

socket_bytes tcp_bytes() {
  socket_bytes result;
  auto* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr)
    return result;
  while (auto* e = ::readdir(dir)) {
    char* end = nullptr;
    auto fd = static_cast<int>(std::strtol(e->d_name, &end, 10));
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir))
      continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    // Fails on anything but a TCP socket (files, pipes, Unix sockets).
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
      continue;
    result.sent += info.tcpi_bytes_acked;
    result.received += info.tcpi_bytes_received;
  }
  ::closedir(dir);
  return result;
}

} // namespace dice::bench::remote
