#pragma once

// The one owner of a POSIX file descriptor: closes it when it goes, so no
// error path leaks one and no fd is closed twice.
//
// Why here (dice::process, header-only): it is the lowest layer that every
// user of raw fds sees. dice_process is plain POSIX, linked by dice-launch
// (no CAF) and by dice_wire (net/, storage/), whose users (dice_actors,
// dice_runtime, dice_torch, the benches and tests) all see it in turn;
// dice_messages, the bottom of the CAF stack, owns no fds.

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace dice {

/// Owns one file descriptor (or none: -1); move-only.
class unique_fd {
 public:
  /// Owns nothing.
  unique_fd() noexcept = default;

  /// Takes ownership of `fd` (-1: nothing).
  explicit unique_fd(int fd) noexcept : fd_(fd) {
    // nop
  }

  /// Takes `other`'s fd; `other` owns nothing afterwards.
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {
    // nop
  }

  /// Closes the fd it owns and takes `other`'s.
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other)
      reset(other.release());
    return *this;
  }

  /// Not copyable: one owner per fd.
  unique_fd(const unique_fd&) = delete;

  /// Not copyable: one owner per fd.
  unique_fd& operator=(const unique_fd&) = delete;

  /// Closes the fd it owns.
  ~unique_fd() {
    reset();
  }

  /// The fd, still owned (-1 if none).
  int get() const noexcept {
    return fd_;
  }

  /// Gives up ownership without closing; the fd is the caller's from now.
  [[nodiscard]] int release() noexcept {
    return std::exchange(fd_, -1);
  }

  /// Closes the fd it owns (if any) and owns `fd` instead.
  void reset(int fd = -1) noexcept {
    auto old = std::exchange(fd_, fd);
    if (old >= 0)
      close_fd(old);
  }

  /// Whether it owns an fd.
  explicit operator bool() const noexcept {
    return fd_ >= 0;
  }

 private:
  // Never retries on EINTR: Linux frees the fd before close can be
  // interrupted, so a retry could close an fd another thread just opened.
  // The errno of a failed close is not this owner's to report: kept as it
  // was, so a caller's `errno` after a failed call survives the cleanup.
  static void close_fd(int fd) noexcept {
    auto saved = errno;
    ::close(fd);
    errno = saved;
  }

  int fd_ = -1;
};

} // namespace dice
