#pragma once

#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/model_snapshot.hpp"

#include "caf/message.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dice {

/// Splits model snapshots into chunks for a peer router and reassembles the
/// chunks a peer router sent. Chunks of a transfer arrive in order (one BASP
/// connection); a transfer that is interrupted, inconsistent or corrupted is
/// dropped with a log line, never delivered torn or mixed with another.
class snapshot_chunker {
 public:
  /// A reassembled snapshot, ready to be routed like a forwarded message.
  struct assembled {
    /// Topic it was published on.
    std::string topic;
    /// Node that published it.
    std::uint32_t sender = 0;
    /// The snapshot (it owns its bytes).
    model_snapshot snapshot;
  };

  /// Chunks of at most `chunk_bytes` (0: the default, 8 MB).
  explicit snapshot_chunker(std::size_t chunk_bytes = default_chunk_bytes);

  /// Bytes per chunk.
  std::size_t chunk_bytes() const noexcept {
    return chunk_bytes_;
  }

  /// True if `msg` is `(topic, model_snapshot)` with more bytes than one
  /// chunk, i.e. worth splitting.
  bool splits(const caf::message& msg) const;

  /// Splits `x` (published on `topic` by `sender`) into chunks that share
  /// its buffer; `origin` is this router's node. With `hash`, each chunk's
  /// checksum is computed here; without, the caller seals each chunk before
  /// it sends it (once, however many peers get the chunks).
  std::vector<snapshot_chunk> split(std::uint32_t origin,
                                    const std::string& topic,
                                    std::uint32_t sender,
                                    const model_snapshot& x, bool hash = true);

  /// Computes a chunk's checksum (of a split without `hash`).
  static void seal(snapshot_chunk& c);

  /// Takes a chunk from a peer; returns the snapshot once its last chunk
  /// arrived and every checksum matched. `node` names this node in logs.
  std::optional<assembled> add(snapshot_chunk&& c, std::uint32_t node);

  /// Drops the incomplete transfers from `origin` (e.g. the peer is lost).
  void drop_origin(std::uint32_t origin, std::uint32_t node,
                   const std::string& why);

  /// Transfers in progress.
  std::size_t pending() const noexcept {
    return partial_.size();
  }

  /// Transfers dropped so far.
  std::uint64_t dropped() const noexcept {
    return dropped_;
  }

  /// Snapshots reassembled so far.
  std::uint64_t completed() const noexcept {
    return completed_;
  }

 private:
  struct partial {
    std::string topic;
    std::uint32_t sender = 0;
    std::uint32_t count = 0;
    std::uint32_t next = 0;
    std::uint64_t total = 0;
    std::uint64_t filled = 0;
    model_snapshot header;
    // Several chunks: the assembly buffer, uninitialized until filled.
    writable_bytes buf;
    // One chunk: its bytes as received, no copy.
    shared_bytes whole;
  };

  using key = std::pair<std::uint32_t, std::uint64_t>;

  void drop(std::map<key, partial>::iterator i, std::uint32_t node,
            const std::string& why);

  std::size_t chunk_bytes_;
  std::uint64_t next_transfer_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t completed_ = 0;
  std::map<key, partial> partial_;
  // Recently dropped transfers: their remaining chunks are ignored quietly
  // (the drop was logged once).
  std::set<key> dead_;
};

} // namespace dice
