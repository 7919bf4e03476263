#include "storage/fd_io.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dice {

namespace {

// Runs `io(p, left, at)` until all bytes moved; 0 bytes moved (end of file)
// or an error other than EINTR ends it with false.
template <class Ptr, class Io>
bool move_all(Ptr p, std::size_t n, off_t at, Io io) {
  while (n > 0) {
    auto k = io(p, n, at);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    p += k;
    n -= static_cast<std::size_t>(k);
    at += k;
  }
  return true;
}

} // namespace

bool write_all(int fd, const void* data, std::size_t n) {
  return move_all(static_cast<const char*>(data), n, 0,
                  [fd](const char* p, std::size_t k, off_t) {
                    return ::write(fd, p, k);
                  });
}

bool pwrite_all(int fd, const void* data, std::size_t n, off_t at) {
  return move_all(static_cast<const char*>(data), n, at,
                  [fd](const char* p, std::size_t k, off_t pos) {
                    return ::pwrite(fd, p, k, pos);
                  });
}

bool pread_all(int fd, void* data, std::size_t n, off_t at) {
  return move_all(static_cast<char*>(data), n, at,
                  [fd](char* p, std::size_t k, off_t pos) {
                    return ::pread(fd, p, k, pos);
                  });
}

std::string sys_error(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

} // namespace dice
