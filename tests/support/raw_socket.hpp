#pragma once

// A stranger's TCP connection for attack tests: raw bytes on a node's port,
// no CAF, no dice. Every wait has a deadline.

#include "dice/process/unique_fd.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace dice::test {

/// A blocking TCP client socket to 127.0.0.1.
class raw_socket {
 public:
  using clock_type = std::chrono::steady_clock;

  /// Connects to 127.0.0.1:`port` (check `ok()`).
  explicit raw_socket(std::uint16_t port) {
    fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (fd_
        && ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr),
                     sizeof(addr))
          != 0)
      fd_.reset();
  }

  /// Takes `other`'s connection.
  raw_socket(raw_socket&& other) noexcept = default;

  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;

  /// Connected.
  bool ok() const noexcept {
    return static_cast<bool>(fd_);
  }

  /// Sends all of `bytes`; false if the peer closed or reset.
  bool send(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      auto n = ::send(fd_.get(), bytes.data() + done, bytes.size() - done,
                      MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Reads and discards until the peer closes (EOF or reset): true, or
  /// false at the deadline. `received` counts what the peer sent.
  bool wait_closed(std::chrono::milliseconds timeout,
                   std::size_t* received = nullptr) {
    auto deadline = clock_type::now() + timeout;
    char buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      if (left.count() <= 0)
        return false;
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        continue;
      auto n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n <= 0)
        return true;
      if (received)
        *received += static_cast<std::size_t>(n);
    }
  }

  /// Reads exactly `n` bytes before the deadline ("" on EOF or timeout).
  std::string read_exactly(std::size_t n, std::chrono::milliseconds timeout) {
    auto deadline = clock_type::now() + timeout;
    std::string result(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - clock_type::now());
      if (left.count() <= 0)
        return {};
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        continue;
      auto k = ::recv(fd_.get(), result.data() + got, n - got, 0);
      if (k <= 0)
        return {};
      got += static_cast<std::size_t>(k);
    }
    return result;
  }

  /// The file descriptor.
  int fd() const noexcept {
    return fd_.get();
  }

 private:
  dice::unique_fd fd_;
};

/// A 32-byte BASP header of CAF 0.17 (network byte order): operation,
/// two padding bytes, flags, payload length, operation data, source and
/// destination actor ids.
inline std::string basp_header(std::uint8_t operation,
                               std::uint32_t payload_len) {
  std::string h(32, '\0');
  h[0] = static_cast<char>(operation);
  for (int i = 0; i < 4; ++i)
    h[4 + i] = static_cast<char>((payload_len >> (24 - 8 * i)) & 0xFF);
  return h;
}

/// The frame that kills a CAF 0.17.6 node without TLS: a client handshake
/// (operation 1) with no payload; BASP dereferences a payload it never got.
inline std::string basp_crash_frame() {
  return basp_header(1, 0);
}

/// A client handshake header announcing a 1 GiB payload: BASP allocates
/// the receive buffer from it before reading a byte of the payload.
inline std::string basp_giant_frame() {
  return basp_header(1, 1u << 30);
}

/// The peak resident memory (VmHWM) of process `pid` in bytes (0 if
/// unreadable).
inline std::size_t peak_rss(int pid) {
  auto path = "/proc/" + std::to_string(pid) + "/status";
  auto* f = std::fopen(path.c_str(), "r");
  if (f == nullptr)
    return 0;
  char line[256];
  std::size_t kb = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr)
    if (std::strncmp(line, "VmHWM:", 6) == 0)
      kb = std::strtoull(line + 6, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}

} // namespace dice::test
