// Raw TCP over loopback, one stream to each of N receiver processes (one
// writer thread each): the baseline of the snapshot figures.

#include "loopback.hpp"
#include "remote_bench.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dice::bench::remote {

namespace {

// One receiver process: reads `size` bytes a round and acks with one byte.
[[noreturn]] void receive_rounds(const sockaddr_in& addr, long size,
                                 long rounds) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  std::vector<char> buf(1 << 20);
  for (long r = 0; r < rounds; ++r) {
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

// Writes `size` bytes to `s` and waits for the receiver's ack.
bool send_round(int s, const std::vector<char>& data) {
  long sent = 0;
  auto size = static_cast<long>(data.size());
  while (sent < size) {
    auto k = ::write(s, data.data() + sent, size - sent);
    if (k <= 0)
      return false;
    sent += k;
  }
  char ack;
  return ::read(s, &ack, 1) == 1;
}

} // namespace

int tcp_main(long size, long rounds, long receivers) {
  std::uint16_t port = 0;
  int ls = listen_loopback(static_cast<int>(receivers), port);
  if (ls < 0)
    return 1;
  auto addr = loopback_address(port);
  auto total = rounds + 2; // two warm-up rounds, as for snapshots
  std::vector<pid_t> pids;
  for (long i = 0; i < receivers; ++i) {
    auto pid = ::fork();
    if (pid == 0)
      receive_rounds(addr, size, total);
    pids.push_back(pid);
  }
  std::vector<int> socks;
  for (long i = 0; i < receivers; ++i)
    socks.push_back(::accept(ls, nullptr, nullptr));
  std::vector<char> data(static_cast<std::size_t>(size), 7);
  // N receivers: one writer thread per socket, as the data plane has one
  // per link, started once and released each round.
  std::mutex mtx;
  std::condition_variable cv;
  long round = 0;
  long finished = 0;
  bool failed = false;
  std::vector<std::thread> writers;
  for (long i = 1; i < receivers; ++i)
    writers.emplace_back([&, s = socks[static_cast<std::size_t>(i)]] {
      for (long r = 1; r <= total; ++r) {
        {
          std::unique_lock<std::mutex> guard{mtx};
          cv.wait(guard, [&] {
            return round >= r;
          });
        }
        auto ok = send_round(s, data);
        std::lock_guard<std::mutex> guard{mtx};
        failed |= !ok;
        ++finished;
        cv.notify_all();
      }
    });
  std::vector<double> times;
  for (long r = 1; r <= total; ++r) {
    auto t0 = clk::now();
    {
      std::lock_guard<std::mutex> guard{mtx};
      round = r;
      finished = 0;
    }
    cv.notify_all();
    // The first socket is this thread's.
    auto ok = send_round(socks[0], data);
    {
      std::unique_lock<std::mutex> guard{mtx};
      cv.wait(guard, [&] {
        return finished == receivers - 1;
      });
      failed |= !ok;
    }
    if (r > 2)
      times.push_back(secs(clk::now() - t0));
  }
  for (auto& w : writers)
    w.join();
  for (auto pid : pids)
    ::waitpid(pid, nullptr, 0);
  if (failed)
    return 1;
  std::sort(times.begin(), times.end());
  auto med = times[times.size() / 2];
  print_json({{"mode", "tcp"},
              {"size", size},
              {"receivers", receivers},
              {"round_s", med},
              {"bytes_per_s", static_cast<double>(size) / med}});
  return 0;
}

} // namespace dice::bench::remote
