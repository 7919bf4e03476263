#pragma once

// The same-host shortcut of reduce_mode::exchange: two ranks on one host
// pass gradients of up to `shm_link::capacity` bytes through shared memory
// instead of their loopback socket (torch/learner_group_shm.cpp).
//
// Why: at the DQN's 18 KB the socket's exchange is mostly the kernel's TCP
// path (perf of BM_allreduce/mode:6/bytes:18440: copies to and from the
// socket 20 %, the TCP stack and its locks most of the rest), about 9 us a
// step; a copy into a mapped segment and a cache line's hand-off are ~1 us.
//
// Each rank writes its message for a peer into its own outbox (a sealed
// memfd that the peer maps through /proc/PID/fd/N: same host, same pid
// namespace, same user), in one of two slots by step parity, and then
// publishes the slot's step. The reader spins on that step, then sleeps in
// poll() on the pair's socket, which the writer rings with one byte only
// when the reader said it sleeps. The socket also tells a reader at once
// when its peer is gone.

#include "dice/core/errc.hpp"

#include "caf/error.hpp"

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dice::detail {

/// What a rank tells a peer about its outbox for that peer (fixed size, sent
/// raw over the proven link; both ranks run the same build).
struct shm_offer {
  char magic[8] = {}; // "dice-lgs"; zeros: no shared memory offered
  std::uint32_t pid = 0;
  std::uint32_t fd = 0;
  std::uint64_t capacity = 0;
  char token[16] = {};
};

/// One peer's pair of outboxes: ours (written here) and theirs (mapped).
class shm_link {
 public:
  /// Largest message that goes through shared memory; larger ones take the
  /// socket, where a copy's cost, not the round trip, dominates.
  static constexpr std::size_t capacity = std::size_t{1} << 20;

  /// This side's outbox (nullptr if the memfd could not be made).
  static std::unique_ptr<shm_link> make();

  shm_link(const shm_link&) = delete;
  shm_link& operator=(const shm_link&) = delete;
  ~shm_link();

  /// The offer that lets a peer on this host map our outbox.
  const shm_offer& offer() const noexcept {
    return offer_;
  }

  /// Maps the peer's outbox from its offer; false when it is not on this
  /// host or anything about it is off (size, seals, token).
  bool attach(const shm_offer& theirs);

  /// Writes step `step`'s message (`bytes` bytes gathered from `out`) and
  /// rings `fd` if the peer sleeps; false if the ring failed.
  bool write(std::uint64_t step, const std::vector<iovec>& out,
             std::size_t bytes, int fd);

  /// Waits for the peer's message of step `step` (spinning for `spin`, then
  /// in poll() on `fd`), at most `timeout`, and copies its `bytes` into
  /// `dst`. `who` names the peer in errors.
  caf::error read(std::uint64_t step, char* dst, std::size_t bytes, int fd,
                  std::chrono::microseconds spin,
                  std::chrono::milliseconds timeout,
                  const std::atomic<bool>& shut, const std::string& who);

 private:
  shm_link() = default;

  int fd_ = -1;
  std::uint8_t* mine_ = nullptr;   // our outbox
  std::uint8_t* theirs_ = nullptr; // the peer's outbox
  shm_offer offer_;
};

/// Over every connected socket in `fds` (by rank; -1: none), offers an
/// outbox (none when `wanted` is false) and maps the peer's: the links of
/// peers that both could map, by rank (null: the socket). Empty if a
/// socket failed by `deadline`.
std::vector<std::unique_ptr<shm_link>>
share_memory(const std::vector<int>& fds, bool wanted,
             std::chrono::steady_clock::time_point deadline, bool& failed);

/// Messages that went through shared memory in this process (for tests).
std::uint64_t shm_messages() noexcept;

} // namespace dice::detail
