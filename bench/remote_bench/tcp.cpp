// Raw TCP, one stream over loopback: the baseline of the snapshot figures.

#include "loopback.hpp"
#include "remote_bench.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace dice::bench::remote {

int tcp_main(long size, long rounds) {
  std::uint16_t port = 0;
  int ls = listen_loopback(1, port);
  if (ls < 0)
    return 1;
  auto addr = loopback_address(port);
  auto pid = ::fork();
  if (pid == 0) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    std::vector<char> buf(1 << 20);
    for (long r = 0; r < rounds + 2; ++r) {
      long got = 0;
      while (got < size) {
        auto k = ::read(s, buf.data(),
                        std::min<long>(static_cast<long>(buf.size()),
                                       size - got));
        if (k <= 0)
          _exit(1);
        got += k;
      }
      char ack = 1;
      if (::write(s, &ack, 1) != 1)
        _exit(1);
    }
    _exit(0);
  }
  int s = ::accept(ls, nullptr, nullptr);
  std::vector<char> data(static_cast<std::size_t>(size), 7);
  std::vector<double> times;
  for (long r = 0; r < rounds + 2; ++r) {
    auto t0 = clk::now();
    long sent = 0;
    while (sent < size) {
      auto k = ::write(s, data.data() + sent, size - sent);
      if (k <= 0)
        return 1;
      sent += k;
    }
    char ack;
    if (::read(s, &ack, 1) != 1)
      return 1;
    if (r >= 2) // two warm-up rounds, as for snapshots
      times.push_back(secs(clk::now() - t0));
  }
  ::waitpid(pid, nullptr, 0);
  std::sort(times.begin(), times.end());
  auto med = times[times.size() / 2];
  print_json({{"mode", "tcp"},
              {"size", size},
              {"round_s", med},
              {"bytes_per_s", static_cast<double>(size) / med}});
  return 0;
}

} // namespace dice::bench::remote
