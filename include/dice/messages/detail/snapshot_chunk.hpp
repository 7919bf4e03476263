#pragma once

#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/shared_bytes.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/data_processor.hpp"
#include "caf/deserializer.hpp"
#include "caf/error.hpp"
#include "caf/meta/type_name.hpp"
#include "caf/sec.hpp"
#include "caf/serializer.hpp"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dice {

/// Default size of one chunk of a snapshot sent to a remote peer (DESIGN §7:
/// BASP messages of 8-16 MB keep the link fast and let small ones through).
constexpr std::size_t default_chunk_bytes = std::size_t{8} << 20;

/// A 64-bit checksum of `n` bytes (XXH3-64 from libxxhash, faster than
/// memcpy): detects chunks or stored items that were corrupted or mixed up.
std::uint64_t checksum64(const void* data, std::size_t n,
                         std::uint64_t seed = 0) noexcept;

/// Copies `n` bytes from `src` to `dst` and returns checksum64(src, n, seed),
/// block by block so each block is hashed and copied while it is in cache
/// (one trip through memory instead of two).
std::uint64_t copy_checksum64(void* dst, const void* src, std::size_t n,
                              std::uint64_t seed = 0) noexcept;

/// Streams bytes through checksum64 in pieces (their concatenation hashes
/// as one call would), so a reader can hash each piece while it is in cache.
/// Copyable; a copy continues independently.
class checksum64_stream {
 public:
  /// Starts a checksum with `seed`.
  explicit checksum64_stream(std::uint64_t seed = 0) noexcept;

  /// Adds `n` more bytes.
  void update(const void* data, std::size_t n) noexcept;

  /// Copies `n` bytes from `src` to `dst` and adds them, block by block so
  /// each block is hashed while it is in cache (copy_checksum64's way).
  void copy_update(void* dst, const void* src, std::size_t n) noexcept;

  /// The checksum of everything added so far.
  std::uint64_t digest() const noexcept;

 private:
  // libxxhash's XXH3_state_t (576 bytes in 0.8, checked where it is used),
  // inline so that a stream needs no allocation and xxhash.h stays private.
  alignas(64) unsigned char state_[640];
};

/// A slice of a byte buffer: the sender refers to its snapshot's shared
/// buffer (no copy until CAF writes the slice into the socket buffer); the
/// receiver owns the bytes it read.
class chunk_bytes {
 public:
  /// An empty slice.
  chunk_bytes() = default;

  /// Bytes [offset, offset + size) of `src`, which stays alive meanwhile.
  chunk_bytes(shared_bytes src, std::size_t offset, std::size_t size)
    : src_(std::move(src)), offset_(offset), size_(size) {}

  /// First byte.
  const std::uint8_t* data() const noexcept {
    return own_.empty() ? src_.data() + offset_ : own_.data();
  }

  /// Number of bytes.
  std::size_t size() const noexcept {
    return own_.empty() ? size_ : own_.size();
  }

  /// Takes the received bytes (empty for a sender-side slice).
  shared_bytes release() noexcept {
    return std::move(own_);
  }

  /// Writes length + raw bytes (one memcpy).
  friend caf::error inspect(caf::serializer& f, chunk_bytes& x) {
    return detail::write_raw_bytes(f, x.data(), x.size());
  }

  /// Reads length + raw bytes, refusing lengths the frame cannot hold.
  friend caf::error inspect(caf::deserializer& f, chunk_bytes& x) {
    writable_bytes buf;
    if (auto err = detail::read_raw_bytes(f, buf))
      return err;
    x = chunk_bytes{};
    if (!buf.empty())
      x.own_ = shared_bytes{std::move(buf)};
    return caf::none;
  }

  /// Other inspectors see a summary.
  template <class Inspector>
  friend std::enable_if_t<
    !std::is_base_of<caf::data_processor<caf::serializer>, Inspector>::value
      && !std::is_base_of<caf::data_processor<caf::deserializer>,
                          Inspector>::value,
    typename Inspector::result_type>
  inspect(Inspector& f, chunk_bytes& x) {
    auto summary = std::to_string(x.size()) + " bytes";
    return f(summary);
  }

 private:
  shared_bytes src_;
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
  shared_bytes own_;
};

/// One piece of a model snapshot on its way from one router to a peer router.
/// Chunks of a transfer travel in order on one connection; the receiving router
/// reassembles them (see `snapshot_chunker`).
struct snapshot_chunk {
  /// Node of the router that split the snapshot.
  std::uint32_t origin = 0;
  /// Transfer id, unique per origin router.
  std::uint64_t transfer = 0;
  /// Topic the snapshot was published on.
  std::string topic;
  /// Node that published it.
  std::uint32_t sender = 0;
  /// Position of this chunk (0-based).
  std::uint32_t seq = 0;
  /// Number of chunks in the transfer.
  std::uint32_t count = 0;
  /// Byte offset of this chunk in the snapshot's buffer.
  std::uint64_t offset = 0;
  /// Size of the snapshot's buffer.
  std::uint64_t total = 0;
  /// checksum64 of this chunk's bytes.
  std::uint64_t checksum = 0;
  /// First chunk only: the snapshot without its bytes (index, version...).
  model_snapshot header;
  /// The bytes.
  chunk_bytes bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, snapshot_chunk& x) {
  return f(caf::meta::type_name("dice::snapshot_chunk"), x.origin, x.transfer,
           x.topic, x.sender, x.seq, x.count, x.offset, x.total, x.checksum,
           x.header, x.bytes);
}

} // namespace dice
