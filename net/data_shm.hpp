#pragma once

// Internal to the data plane: the same-host shortcut. A snapshot for peers
// on this host is written once into a memfd (recycled from a small pool);
// a peer maps it read-only through /proc/PID/fd/N and hands the mapping on
// as the snapshot's bytes, releasing the segment when the last handle of
// them is gone. Nothing is ever named in
// /dev/shm, so a process killed with -9 cannot leak a segment: the kernel
// frees it with the last fd.

#include "dice/messages/shared_bytes.hpp"
#include "dice/process/unique_fd.hpp"

#include "caf/expected.hpp"

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dice::net {

/// A memfd holding one snapshot's bytes after a 4 KiB header (magic, tag,
/// size), sealed against resizing. It is recycled: once no peer and no
/// item holds it, it goes back to a small process-wide pool, and the next
/// snapshot of the same size is copied into its pages through a mapping the
/// segment keeps (no page allocation, no per-page lookup, no freeing). A
/// segment is rewritten only once every peer released it, i.e. dropped the
/// last handle of the bytes it shared out of its mapping. A rewrite first
/// zeroes the tag, then writes the bytes, then a new tag; a reader checks
/// the tag before it shares the bytes, so a reference to a segment being
/// rewritten (a stale or forged one) delivers nothing.
struct shm_segment {
  /// The memfd (closed with the segment, or kept in the pool).
  unique_fd fd;
  /// Random tag of the bytes written now (never 0), checked by the reader
  /// (fd numbers and segments are reused).
  std::uint64_t tag = 0;
  /// Bytes after the header.
  std::uint64_t size = 0;
  /// Cleared when a peer that may still read it is lost: such a segment is
  /// closed, never rewritten.
  std::atomic<bool> reusable{true};
  /// A writable view of the whole file, made when it is first recycled.
  std::uint8_t* view = nullptr;
  /// Set for a block's bytes shared as they are (`share_block`): they keep
  /// the block, whose memfd this segment is; such a segment is never
  /// pooled.
  shared_bytes owner;

  /// The memfd's number in this process.
  int fd_number() const noexcept {
    auto b = owner.block();
    return b != nullptr ? b->fd : fd.get();
  }

  ~shm_segment();
};

/// Writes `n` bytes into a pooled segment of that size, or else a new one;
/// null on failure.
std::shared_ptr<shm_segment> make_segment(const std::uint8_t* data,
                                          std::size_t n);

/// `bytes` as a segment without a copy, if they fill a memfd block
/// (`writable_bytes::shareable`); null otherwise. Its header gets a tag once
/// per content of the block; a lost peer's reference retires the block.
std::shared_ptr<shm_segment> share_block(const shared_bytes& bytes);

/// A read-only mapping of a peer's segment (unmapped with its last handle:
/// the views that find it again, and the bytes handed out of it).
struct shm_mapping {
  /// The mapping's first byte (the segment's header).
  const std::uint8_t* addr = nullptr;
  /// Its length (header and bytes).
  std::size_t len = 0;

  ~shm_mapping();
};

/// A receiver's read-only views of one peer's segments, kept while the
/// peer recycles them (at most `max_pooled_segments` + 1, the oldest
/// dropped first; each mapping lives on while bytes handed out of it do).
class shm_views {
 public:
  shm_views() = default;
  shm_views(const shm_views&) = delete;
  shm_views& operator=(const shm_views&) = delete;

  /// The bytes of a segment of process `pid`, shared out of its mapping (no
  /// copy); fails unless it is sealed against resizing and its header
  /// matches `tag` and `size`. The sender rewrites a segment only after its
  /// release, so the bytes stay as they are while any handle of them lives;
  /// `released` runs when the last one is gone (not on failure).
  caf::expected<shared_bytes> share(pid_t pid, int fd, std::uint64_t tag,
                                    std::uint64_t size,
                                    std::function<void()> released);

 private:
  struct view {
    dev_t dev;
    ino_t ino;
    std::shared_ptr<const shm_mapping> map;
    // The sender's fd number it was last found under.
    int fd;
  };
  // A view last found under `fd` whose header holds `tag` now, or null.
  std::shared_ptr<const shm_mapping> known(int fd, std::uint64_t tag,
                                           std::size_t len) const;
  caf::expected<std::shared_ptr<const shm_mapping>> find(pid_t pid, int fd,
                                                         std::uint64_t size);
  std::vector<view> views_; // oldest first
};

/// Marks every segment in `held` not reusable (their peer is lost and may
/// still read them) and clears it.
void drop_held(std::map<std::uint64_t, std::shared_ptr<shm_segment>>& held);

/// Closes the pooled segments of this process.
void drain_segment_pool();

/// A small memfd holding a random token: a peer that can read it through
/// /proc/PID/fd/N shares this host (and pid namespace, and user).
struct shm_probe {
  /// The memfd.
  unique_fd fd;
  /// 16 random bytes it holds.
  std::string token;
};

/// Creates a probe; null if memfds are unavailable.
std::unique_ptr<shm_probe> make_probe();

/// True if /proc/`pid`/fd/`fd` holds `token`.
bool check_probe(pid_t pid, int fd, const std::string& token);

/// Segments of this process in use: held for a peer or by a queued item
/// (for tests: reclaimed on receipt or loss). Pooled ones are not counted.
std::uint64_t open_segments() noexcept;

/// Snapshots this process wrote into a recycled segment.
std::uint64_t reused_segments() noexcept;

/// Snapshots this process shared from the block they were built in.
std::uint64_t borrowed_segments() noexcept;

/// Idle segments in this process's pool (at most `max_pooled_segments`).
std::uint64_t pooled_segments() noexcept;

/// How many idle segments the pool keeps (a publisher that sends the next
/// snapshot before every peer released the last one needs two).
inline constexpr std::size_t max_pooled_segments = 2;

} // namespace dice::net
