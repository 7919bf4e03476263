#pragma once

#include "caf/binary_deserializer.hpp"
#include "caf/data_processor.hpp"
#include "caf/deserializer.hpp"
#include "caf/error.hpp"
#include "caf/sec.hpp"
#include "caf/serializer.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace dice {

/// Largest byte buffer dice accepts from the wire (CAF 0.17's BASP frames are
/// limited to 4 GiB; anything near that is a bug or an attack).
constexpr std::uint64_t max_wire_bytes = std::uint64_t{2} << 30;

namespace detail {

/// Bytes before a shareable block's data: the same-host header
/// (net/data_shm.cpp: magic, tag, size), zeroed whenever the block is
/// handed out for new bytes.
inline constexpr std::size_t shareable_header = 4096;

/// The seals every same-host segment carries, a shareable block as one of
/// net/data_shm.cpp's own (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW: never
/// resized, so a reader's view never reaches past the end; blocks are
/// rewritten in place once every peer released them, so no F_SEAL_WRITE).
int shareable_seals() noexcept;

/// A memfd of `shareable_header + size` bytes, sealed against resizing, and
/// its read-write mapping: what `writable_bytes::shareable` hands out, so
/// that a same-host peer maps the very pages the snapshot was built in.
struct shareable_block {
  /// The memfd (open while the block lives).
  int fd = -1;
  /// The mapping of the whole file, header first.
  std::uint8_t* base = nullptr;
  /// Bytes after the header.
  std::size_t size = 0;
  /// Guards `tag` and `last_tag` (the header's tag protocol).
  std::mutex mtx;
  /// Tag of the bytes it holds now (0: not shared yet).
  std::uint64_t tag = 0;
  /// The tag before (the next one differs from it).
  std::uint64_t last_tag = 0;
  /// Set when a peer may still read it: closed with its last handle, never
  /// handed out again.
  std::atomic<bool> retired{false};
};

/// Deleter of shareable bytes: the block goes back to a small pool (or is
/// closed if retired).
struct shareable_release {
  /// The block the bytes live in.
  shareable_block* block = nullptr;
  /// Returns or closes the block.
  void operator()(std::uint8_t*) const noexcept;
};

} // namespace detail

/// Bytes that one owner fills before they are shared: they start
/// uninitialized (no zero-fill pass over what is about to be overwritten),
/// and large ones live on transparent huge pages (one page fault per 2 MiB
/// instead of 512; fresh 100 MB buffers were mostly page faults). Freeze
/// them into a `shared_bytes` once written.
class writable_bytes {
 public:
  /// An empty buffer.
  writable_bytes() = default;

  /// `n` uninitialized bytes, 64-byte aligned (throws std::bad_alloc).
  explicit writable_bytes(std::size_t n);

  /// `n` uninitialized bytes that a same-host peer can map instead of
  /// receiving a copy: from 256 KiB up to 2 MiB they fill a recycled memfd
  /// (`detail::shareable_block`); other sizes, or where memfds fail, are
  /// `writable_bytes(n)`. snapshot_builder builds snapshots in these.
  static writable_bytes shareable(std::size_t n);

  /// Takes the bytes; `other` is empty afterwards.
  writable_bytes(writable_bytes&& other) noexcept
    : ptr_(std::move(other.ptr_)), size_(other.size_) {
    other.size_ = 0;
  }

  /// Takes the bytes; `other` is empty afterwards.
  writable_bytes& operator=(writable_bytes&& other) noexcept {
    if (this != &other) {
      ptr_ = std::move(other.ptr_);
      size_ = other.size_;
      other.size_ = 0;
    }
    return *this;
  }

  // One writer at a time: the bytes are shared only once frozen.
  writable_bytes(const writable_bytes&) = delete;
  writable_bytes& operator=(const writable_bytes&) = delete;

  /// First byte, or nullptr when empty.
  std::uint8_t* data() noexcept {
    return ptr_.get();
  }

  /// First byte, or nullptr when empty.
  const std::uint8_t* data() const noexcept {
    return ptr_.get();
  }

  /// Number of bytes.
  std::size_t size() const noexcept {
    return size_;
  }

  /// True when the buffer holds no bytes.
  bool empty() const noexcept {
    return size_ == 0;
  }

  /// Keeps the first `n` bytes (never grows; the allocation stays).
  void shrink(std::size_t n) noexcept {
    if (n < size_)
      size_ = n;
  }

 private:
  friend class shared_bytes;
  std::shared_ptr<std::uint8_t> ptr_;
  std::size_t size_ = 0;
};

namespace detail {

/// Writes a length and then the raw bytes (one memcpy, never per element).
inline caf::error write_raw_bytes(caf::serializer& f, const std::uint8_t* data,
                                  std::size_t n) {
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > 0)
    if (auto err = f.apply_raw(n, const_cast<std::uint8_t*>(data)))
      return err;
  return f.end_sequence();
}

/// Reads what write_raw_bytes wrote into `out`. Refuses lengths above
/// `max_wire_bytes`, and lengths beyond the bytes actually received (a
/// truncated or hostile frame) before allocating anything for them (BASP
/// decodes with a binary_deserializer, so the wire gets this check).
inline caf::error read_raw_bytes(caf::deserializer& f, writable_bytes& out) {
  std::size_t n = 0;
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > max_wire_bytes)
    return caf::sec::invalid_argument;
  if (auto bin = dynamic_cast<caf::binary_deserializer*>(&f))
    if (n > bin->remaining())
      return caf::sec::end_of_stream;
  // Decoded straight into an uninitialized buffer: one copy, no zero-fill.
  writable_bytes buf{n};
  if (n > 0)
    if (auto err = f.apply_raw(n, buf.data()))
      return err;
  out = std::move(buf);
  return f.end_sequence();
}

} // namespace detail

/// An immutable, reference-counted byte buffer. Copies share the bytes, so a
/// snapshot sent to N local receivers exists once in memory; on the wire it
/// is written with one memcpy, never element by element.
class shared_bytes {
 public:
  /// An empty buffer.
  shared_bytes() = default;

  /// Takes ownership of `bytes`; they are never modified afterwards.
  explicit shared_bytes(std::vector<std::uint8_t> bytes) : size_(bytes.size()) {
    auto owner = std::make_shared<const std::vector<std::uint8_t>>(
      std::move(bytes));
    // Aliasing constructor: shares the vector's control block, points at
    // its bytes (so both origins look the same to every reader).
    ptr_ = std::shared_ptr<const std::uint8_t>{owner, owner->data()};
  }

  /// Shares `other`'s bytes.
  shared_bytes(const shared_bytes& other) = default;

  /// Shares `other`'s bytes.
  shared_bytes& operator=(const shared_bytes& other) = default;

  /// Takes `other`'s handle; `other` is empty afterwards.
  shared_bytes(shared_bytes&& other) noexcept
    : ptr_(std::move(other.ptr_)), size_(other.size_),
      checksum_(other.checksum_), has_checksum_(other.has_checksum_) {
    other.size_ = 0;
    other.has_checksum_ = false;
  }

  /// Takes `other`'s handle; `other` is empty afterwards.
  shared_bytes& operator=(shared_bytes&& other) noexcept {
    if (this != &other) {
      ptr_ = std::move(other.ptr_);
      size_ = other.size_;
      checksum_ = other.checksum_;
      has_checksum_ = other.has_checksum_;
      other.size_ = 0;
      other.has_checksum_ = false;
    }
    return *this;
  }

  /// Shares `n` bytes at `data.get()`, which `data`'s owner keeps alive and
  /// unchanged until its last handle is gone (e.g. a read-only mapping of
  /// another process's segment, released to it then).
  shared_bytes(std::shared_ptr<const std::uint8_t> data, std::size_t n) noexcept
    : ptr_(std::move(data)), size_(n) {
    // nop
  }

  /// Freezes `bytes` (no copy); the writer gives up its handle.
  explicit shared_bytes(writable_bytes&& bytes) noexcept
    : ptr_(std::move(bytes.ptr_)), size_(bytes.size_) {
    bytes.size_ = 0;
  }

  /// Freezes `bytes` whose checksum64 the filler computed as it wrote them
  /// (snapshot_builder hashes each block while it copies it in; the data
  /// plane's reader after it verified them). The data plane then sends
  /// them without a pass of its own over them. Only pass what checksum64
  /// returns for these bytes: a receiver tears every transfer whose bytes do
  /// not match it.
  shared_bytes(writable_bytes&& bytes, std::uint64_t checksum) noexcept
    : ptr_(std::move(bytes.ptr_)), size_(bytes.size_), checksum_(checksum),
      has_checksum_(true) {
    bytes.size_ = 0;
  }

  /// First byte, or nullptr when empty.
  const std::uint8_t* data() const noexcept {
    return size_ == 0 ? nullptr : ptr_.get();
  }

  /// Number of bytes.
  std::size_t size() const noexcept {
    return size_;
  }

  /// True when the buffer holds no bytes.
  bool empty() const noexcept {
    return size() == 0;
  }

  /// checksum64 of the bytes if it came with them (see the constructor that
  /// takes one), else nothing: nothing here hashes.
  std::optional<std::uint64_t> known_checksum() const noexcept {
    if (!has_checksum_)
      return std::nullopt;
    return checksum_;
  }

  /// How many handles share these bytes (for tests and diagnostics).
  long use_count() const noexcept {
    return ptr_.use_count();
  }

  /// The memfd block these bytes start, if they came from
  /// `writable_bytes::shareable` (else null).
  detail::shareable_block* block() const noexcept {
    auto d = std::get_deleter<detail::shareable_release>(ptr_);
    if (d == nullptr || d->block == nullptr || size_ == 0)
      return nullptr;
    auto b = d->block;
    return ptr_.get() == b->base + detail::shareable_header && size_ <= b->size
      ? b
      : nullptr;
  }

  /// True if both handles point at the very same bytes in memory.
  bool same_buffer(const shared_bytes& other) const noexcept {
    return ptr_ == other.ptr_;
  }

  /// Byte-wise equality.
  friend bool operator==(const shared_bytes& x, const shared_bytes& y) {
    if (x.ptr_ == y.ptr_)
      return true;
    return x.size() == y.size()
      && (x.size() == 0 || std::equal(x.data(), x.data() + x.size(), y.data()));
  }

  friend bool operator!=(const shared_bytes& x, const shared_bytes& y) {
    return !(x == y);
  }

  /// Writes length + raw bytes (one memcpy).
  friend caf::error inspect(caf::serializer& f, shared_bytes& x) {
    return detail::write_raw_bytes(f, x.data(), x.size());
  }

  /// Reads length + raw bytes; refuses oversize or truncated input.
  friend caf::error inspect(caf::deserializer& f, shared_bytes& x) {
    writable_bytes buf;
    if (auto err = detail::read_raw_bytes(f, buf))
      return err;
    x = shared_bytes{std::move(buf)};
    return caf::none;
  }

  /// Other inspectors (to_string, ...) see a short summary, not the bytes.
  template <class Inspector>
  friend std::enable_if_t<
    !std::is_base_of<caf::data_processor<caf::serializer>, Inspector>::value
      && !std::is_base_of<caf::data_processor<caf::deserializer>,
                          Inspector>::value,
    typename Inspector::result_type>
  inspect(Inspector& f, shared_bytes& x) {
    auto summary = std::to_string(x.size()) + " bytes";
    return f(summary);
  }

 private:
  std::shared_ptr<const std::uint8_t> ptr_;
  std::size_t size_ = 0;
  std::uint64_t checksum_ = 0;
  bool has_checksum_ = false;
};

} // namespace dice
