#pragma once

// Internal to the data plane: the same-host shortcut. A snapshot for peers
// on this host is written once into a sealed memfd; a peer reads it through
// /proc/PID/fd/N. Nothing is ever named in /dev/shm, so a process killed
// with -9 cannot leak a segment: the kernel frees it with the last fd.

#include "dice/messages/shared_bytes.hpp"

#include "caf/expected.hpp"

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace dice::net {

/// A sealed memfd holding one snapshot's bytes after a 4 KiB header
/// (magic, tag, size).
struct shm_segment {
  /// The memfd (closed with the segment).
  int fd = -1;
  /// Random tag, checked by the reader (fd numbers are reused).
  std::uint64_t tag = 0;
  /// Bytes after the header.
  std::uint64_t size = 0;

  ~shm_segment();
};

/// Writes `n` bytes into a new sealed segment; null on failure.
std::shared_ptr<shm_segment> make_segment(const std::uint8_t* data,
                                          std::size_t n);

/// Maps a segment of process `pid` read-only and shares its bytes (no copy;
/// unmapped with the last handle); fails unless it is sealed and its header
/// matches `tag` and `size`.
caf::expected<shared_bytes> read_segment(pid_t pid, int fd, std::uint64_t tag,
                                         std::uint64_t size);

/// A small memfd holding a random token: a peer that can read it through
/// /proc/PID/fd/N shares this host (and pid namespace, and user).
struct shm_probe {
  /// The memfd.
  int fd = -1;
  /// 16 random bytes it holds.
  std::string token;
  ~shm_probe();
};

/// Creates a probe; null if memfds are unavailable.
std::unique_ptr<shm_probe> make_probe();

/// True if /proc/`pid`/fd/`fd` holds `token`.
bool check_probe(pid_t pid, int fd, const std::string& token);

/// Open segments of this process (for tests: reclaimed on receipt or loss).
std::uint64_t open_segments() noexcept;

/// Peers' segments this process maps now (for tests: unmapped with the
/// last handle of the received bytes).
std::uint64_t mapped_segments() noexcept;

} // namespace dice::net
