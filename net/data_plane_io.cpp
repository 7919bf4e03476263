// The data plane's blocking I/O: sockets with timeouts, reads and writes
// through TLS or not, and its threads (SIGPIPE blocked).
#include "data_plane_impl.hpp"

namespace dice::net {

namespace plane_detail {

void set_timeout(int fd, int option, caf::timespan x) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(x).count();
  if (us <= 0 && x.count() > 0)
    us = 1; // 0 would mean "no timeout"
  timeval tv{static_cast<time_t>(us / 1000000),
             static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

// Blocking from now on; both directions wait at most `timeout` (0: a read
// waits for ever).
void set_blocking(int fd, caf::timespan send_timeout,
                  caf::timespan recv_timeout) {
  auto flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  set_timeout(fd, SO_SNDTIMEO, send_timeout);
  set_timeout(fd, SO_RCVTIMEO, recv_timeout);
}

caf::timespan left_until(deadline_clock::time_point deadline) {
  auto left = deadline - deadline_clock::now();
  return std::max(std::chrono::duration_cast<caf::timespan>(left),
                  caf::timespan{1});
}

// One read from a blocking socket, through TLS when `ssl` is set: the
// number of bytes, 0 on an orderly close, -1 on an error or timeout.
long read_some(int fd, ssl_st* ssl, char* out, std::size_t n) {
  if (ssl != nullptr) {
    auto k = SSL_read(ssl, out,
                      static_cast<int>(std::min<std::size_t>(n, INT_MAX)));
    if (k > 0)
      return k;
    auto err = SSL_get_error(ssl, k);
    ERR_clear_error();
    return err == SSL_ERROR_ZERO_RETURN ? 0 : -1;
  }
  for (;;) {
    auto k = ::recv(fd, out, n, 0);
    if (k < 0 && errno == EINTR)
      continue;
    return k;
  }
}

// Reads exactly `n` bytes: n on success, 0 on a close before the first
// byte, -1 on a close or error in the middle.
long read_exactly(int fd, ssl_st* ssl, char* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    auto k = read_some(fd, ssl, out + got, n - got);
    if (k <= 0)
      return got == 0 && k == 0 ? 0 : -1;
    got += static_cast<std::size_t>(k);
  }
  return static_cast<long>(n);
}

// Writes the iovecs whole (blocking socket with a send timeout), through
// TLS when `ssl` is set (no writev there: one SSL_write per piece).
bool write_all(int fd, ssl_st* ssl, iovec* iov, int count) {
  if (ssl != nullptr) {
    for (int i = 0; i < count; ++i) {
      auto p = static_cast<const char*>(iov[i].iov_base);
      auto left = iov[i].iov_len;
      while (left > 0) {
        auto n = static_cast<int>(std::min<std::size_t>(left, 1u << 30));
        auto k = SSL_write(ssl, p, n);
        if (k <= 0) {
          ERR_clear_error();
          return false;
        }
        p += k;
        left -= static_cast<std::size_t>(k);
      }
    }
    return true;
  }
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    auto k = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    auto left = static_cast<std::size_t>(k);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

} // namespace plane_detail

using namespace plane_detail;

// A thread of the plane: OpenSSL writes with write(2), not send(2) with
// MSG_NOSIGNAL, so a peer gone mid-write would raise SIGPIPE and end the
// process; blocked in these threads it stays pending and harmless.
std::thread plane_thread(std::function<void()> fn) {
  return std::thread{[fn = std::move(fn)] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    fn();
  }};
}

bool write_bytes(int fd, ssl_st* ssl, const std::string& bytes) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  return write_all(fd, ssl, &iov, 1);
}

} // namespace dice::net
