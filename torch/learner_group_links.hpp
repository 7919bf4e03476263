#pragma once

// dice's own TCP connection to every peer of a learner group, for
// reduce_mode::exchange (torch/learner_group_links.cpp: forming them;
// torch/learner_group_links_step.cpp: one step over them).
//
// Why not Gloo's pairs: a Gloo receive is read by Gloo's device thread,
// which then wakes the caller, and a send notifies the receiver first; both
// are thread hand-offs the caller waits for (about 10-60 us each on this
// VM), and under load the device thread spins on epoll while the caller
// holds the pair's lock (docs/learner_group.md). Here the caller's thread
// writes and reads the sockets itself.

#include "dice/torch/learner_group.hpp"

#include "learner_group_shm.hpp"
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dice::detail {

/// One connection per peer; connect() proves every one as the Gloo pairs
/// are proven (prove_pairs), so it admits nobody the group would refuse.
class exchange_links {
 public:
  /// Publishes `value` under `key` in the group's rendezvous store.
  using publish_fn = std::function<void(const std::string&,
                                        const std::string&)>;
  /// The value under `key`, waiting for it (throws at the join timeout).
  using lookup_fn = std::function<std::string(const std::string&)>;

  /// Listens on `cfg.address`, publishes the port, connects to every lower
  /// rank and accepts every higher one within `cfg.join_timeout`. With a
  /// secret, each connection proves both ends hold it (HMAC-SHA256 over a
  /// nonce from each end); a connection that fails is closed, and the
  /// listener goes on waiting for the real peer. Then every pair on one
  /// host (unless `cfg.shared_memory` is off on either side) sets up its
  /// shared-memory outboxes (learner_group_shm.hpp).
  static caf::expected<std::shared_ptr<exchange_links>>
  connect(const learner_group_config& cfg, const publish_fn& publish,
          const lookup_fn& lookup, const std::string& where);

  exchange_links(const exchange_links&) = delete;
  exchange_links& operator=(const exchange_links&) = delete;
  ~exchange_links();

  /// One step: sends the bytes of `out` to every peer and receives as many
  /// from each peer p into `in[p]`, in the calling thread, waiting at most
  /// `timeout` without progress. Every message carries the step number and
  /// its length, so that ranks out of step are an error, not wrong sums.
  /// A message of at most `shm_link::capacity` bytes to a peer on this
  /// host goes through shared memory.
  caf::error exchange(const std::vector<iovec>& out, std::size_t bytes,
                      const std::vector<char*>& in,
                      std::chrono::milliseconds timeout,
                      const std::string& where);

  /// From any thread: ends every connection in order (FIN); an exchange
  /// blocked on one returns an error at once.
  void shut() noexcept;

 private:
  explicit exchange_links(int rank, int size);

  // The part of exchange() on the sockets: every peer but those for which
  // `by_memory(rank)` holds.
  template <class ByMemory>
  caf::error exchange_sockets(std::uint64_t step, const std::vector<iovec>& out,
                              std::size_t bytes, const std::vector<char*>& in,
                              std::chrono::milliseconds timeout,
                              const std::string& where, ByMemory by_memory);

  int rank_;
  std::vector<int> fds_;                       // by rank; -1 for this rank
  std::vector<std::unique_ptr<shm_link>> shm_; // by rank; null: the socket
  std::uint64_t step_ = 0;
  std::atomic<bool> shut_{false};
};

using links_ptr = std::shared_ptr<exchange_links>;

} // namespace dice::detail
