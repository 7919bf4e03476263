#pragma once

// Storage (DI-engine's Storage / FileStorage / FileModelStorage): bytes kept
// in a file or a POSIX shared-memory segment, referred to by a storage_ref
// that travels on the router instead of the bytes.

#include "dice/messages/context_delta.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/shared_bytes.hpp"
#include "dice/messages/storage_ref.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dice {

/// Where and how long a loader keeps what it saves.
struct storage_options {
  /// A file in `dirname`, or a shared-memory segment (same host only).
  storage_kind kind = storage_kind::file;
  /// Directory of the files (created with its parents if missing; DI-engine
  /// used a non-recursive mkdir). Ignored for shared memory.
  std::string dirname = "/tmp/dice-storage";
  /// A stored item is removed this long after its save completed
  /// (DI-engine: ttl=20 s). Readers that come later get a warning.
  caf::timespan ttl = std::chrono::seconds{20};
  /// Node id of the owner: part of names and log lines.
  std::uint32_t node = 0;
};

/// One contiguous piece of what is stored.
using byte_span = std::pair<const std::uint8_t*, std::size_t>;

/// Writes `parts` back to back into a new file or shared-memory segment
/// named after `opts.node` and a unique counter. A file is written under a
/// temporary name and renamed, so a reader never sees half of it.
caf::expected<storage_ref> store_bytes(const storage_options& opts,
                                       const std::vector<byte_span>& parts);

/// Reads what `ref` points at into a private buffer and hands it to
/// `fn(data, size)` after checking its size (decoders check the checksum):
/// a writer that rewrites, truncates or recycles the item meanwhile never
/// changes what `fn` sees (a shared mapping could tear or raise SIGBUS). A
/// missing item is `errc::storage_missing`; a shared-memory segment of
/// another host, a special file (FIFO, device, directory), a symlink, a
/// truncated or corrupted item `errc::storage_failed` /
/// `errc::malformed_input`.
template <class F>
caf::error with_stored_bytes(const storage_ref& ref, F fn);

/// Checks that `ref`, which came from the wire, names an item a loader with
/// `opts` may open: a file directly inside `opts.dirname` with a plain dice
/// name ("dice.*": no '/', no "..", no other directory), or a shared-memory
/// segment with a plain dice name ("/dice.*"). Anything else is
/// `errc::unauthorized` (counted as trust_event::message_rejected): a peer
/// must not make a loader open arbitrary paths.
caf::error confine(const storage_ref& ref, const storage_options& opts);

/// Removes the item (missing is not an error).
caf::error remove_storage(const storage_ref& ref);

/// Removes the shared-memory segments in `dir` (/dev/shm) that dice
/// processes of this user left behind when they died (kill -9, a crash): a
/// plain file named dice.NODE.PID.TAG.N or dice.pool.PID.TAG.N, owned by
/// this user, not written for `min_age` (a reader may still want what a
/// process stored just before it died), whose PID is not this process and
/// is not running. Returns how many it removed; a segment of a running
/// process (or of a PID reused by one) stays.
std::size_t
sweep_dead_segments(const std::string& dir = "/dev/shm",
                    std::chrono::seconds min_age = std::chrono::seconds{120});

/// This host's name (shared memory is only readable on it).
const std::string& this_host();

// -- encodings ----------------------------------------------------------------

/// Saves a snapshot in dice's raw snapshot format (header + the buffer as
/// is: one copy of the tensor bytes).
caf::expected<storage_ref> store(const storage_options& opts,
                                 const model_snapshot& x);

/// Saves a context delta (CAF's binary encoding; user items inside stay the
/// Boost archives they are).
caf::expected<storage_ref> store(const storage_options& opts,
                                 const context_delta& x);

/// Loads a snapshot saved by `store`; the result owns fresh bytes, so later
/// saves or removals never change it.
caf::expected<model_snapshot> load_snapshot(const storage_ref& ref);

/// Loads a context delta saved by `store`.
caf::expected<context_delta> load_context(const storage_ref& ref);

// -- implementation -----------------------------------------------------------

namespace detail {

/// Reads all of `ref` (size as `ref.size` says) into `out` with pread.
caf::error read_storage(const storage_ref& ref, writable_bytes& out);

} // namespace detail

template <class F>
caf::error with_stored_bytes(const storage_ref& ref, F fn) {
  writable_bytes buf;
  if (auto err = detail::read_storage(ref, buf))
    return err;
  return fn(static_cast<const std::uint8_t*>(buf.data()), buf.size());
}

} // namespace dice

namespace dice {

/// Keeps track of stored items and removes each `ttl` after its save
/// completed (DI-engine's cleanup thread, without its sleeps); removes the
/// rest when destroyed (DI-engine leaked files younger than ttl at exit).
class storage_keeper {
 public:
  /// Clock the keeper measures TTLs with (the actor clock in loaders).
  using time_point = std::chrono::steady_clock::time_point;

  /// Keeps items saved with `opts`.
  explicit storage_keeper(storage_options opts) : opts_(std::move(opts)) {}

  storage_keeper(const storage_keeper&) = delete;
  storage_keeper& operator=(const storage_keeper&) = delete;

  /// Removes every item still kept.
  ~storage_keeper();

  /// The options.
  const storage_options& options() const noexcept {
    return opts_;
  }

  /// Tracks `ref`, whose save completed at `done`.
  void add(storage_ref ref, time_point done) {
    items_.emplace_back(done + opts_.ttl, std::move(ref));
  }

  /// Removes every item expired at `now`; returns how many.
  std::size_t sweep(time_point now);

  /// When the oldest item expires (max() when nothing is kept).
  time_point next_expiry() const noexcept {
    return items_.empty() ? time_point::max() : items_.front().first;
  }

  /// Number of items kept.
  std::size_t size() const noexcept {
    return items_.size();
  }

  /// Removes everything now.
  void clear();

 private:
  storage_options opts_;
  std::vector<std::pair<time_point, storage_ref>> items_;
};

} // namespace dice
