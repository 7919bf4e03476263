#pragma once

#include "dice/messages/shared_bytes.hpp"

#include "caf/error.hpp"
#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dice {

/// Element type of a tensor in a snapshot (a LibTorch-free mirror of the
/// dtypes a state_dict holds).
enum class dtype : std::uint8_t {
  float32,
  float64,
  float16,
  bfloat16,
  int64,
  int32,
  int16,
  int8,
  uint8,
  boolean,
};

/// Bytes per element, 0 for an unknown value.
std::size_t element_size(dtype x) noexcept;

/// The name PyTorch uses, e.g. "float32".
const char* to_string(dtype x) noexcept;

/// Where one named tensor lives inside a snapshot's buffer.
struct tensor_entry {
  /// state_dict key, e.g. "fc1.weight".
  std::string name;
  /// Element type.
  dtype type = dtype::float32;
  /// Sizes of each dimension.
  std::vector<std::int64_t> shape;
  /// Byte offset into the snapshot buffer.
  std::uint64_t offset = 0;
  /// Byte length (element_size(type) * product(shape)).
  std::uint64_t nbytes = 0;
};

/// Field-wise equality.
bool operator==(const tensor_entry& x, const tensor_entry& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_entry& x) {
  return f(caf::meta::type_name("dice::tensor_entry"), x.name, x.type, x.shape,
           x.offset, x.nbytes);
}

/// A model's state_dict (parameters and buffers) as ONE flat immutable byte
/// buffer plus an index. Copies share the buffer.
struct model_snapshot {
  /// Node id of the sender.
  std::uint32_t sender = 0;
  /// Incarnation of the sender (changes when a node restarts).
  std::uint64_t incarnation = 0;
  /// Monotonic version per sender incarnation (DI-engine's PME `id`).
  std::int64_t version = 0;
  /// Sender's wall clock at send time, ns since the UNIX epoch.
  std::int64_t send_time_ns = 0;
  /// The tensors, in state_dict order.
  std::vector<tensor_entry> index;
  /// Raw tensor bytes (host byte order, contiguous, CPU).
  shared_bytes data;
};

/// Field-wise equality (bytes compared by content).
bool operator==(const model_snapshot& x, const model_snapshot& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_snapshot& x) {
  return f(caf::meta::type_name("dice::model_snapshot"), x.sender,
           x.incarnation, x.version, x.send_time_ns, x.index, x.data);
}

/// Checks that the index is consistent with the buffer: known dtypes,
/// non-negative shapes, nbytes matching shape and dtype, every tensor inside
/// the buffer, no overlaps, unique names. Untrusted snapshots pass this
/// before any byte is read.
caf::error validate(const model_snapshot& x);

class checksum64_stream;

/// Builds a snapshot index + buffer from raw tensors (used by the LibTorch
/// codec and by tests); tensors are laid out back to back, 64-byte aligned.
/// The buffer's checksum64 is computed while the bytes are copied in
/// (`shared_bytes::known_checksum`), so that no sender hashes them again;
/// up to 8 MiB, above which the copy with the hash costs more than it saves.
class snapshot_builder {
 public:
  /// Reserves room for `total_bytes` of tensor data (sum of `padded()`), in
  /// bytes same-host peers map (`writable_bytes::shareable`).
  explicit snapshot_builder(std::size_t total_bytes = 0);

  /// Takes `other`'s tensors; `other` is empty afterwards.
  snapshot_builder(snapshot_builder&& other) noexcept;

  /// Takes `other`'s tensors; `other` is empty afterwards.
  snapshot_builder& operator=(snapshot_builder&& other) noexcept;

  ~snapshot_builder();

  /// Room a tensor of `nbytes` takes in the buffer, alignment included.
  static std::size_t padded(std::size_t nbytes) noexcept {
    return (nbytes + 63) / 64 * 64;
  }

  /// Appends a tensor's bytes.
  void add(std::string name, dtype type, std::vector<std::int64_t> shape,
           const void* bytes, std::size_t nbytes);

  /// Finishes the snapshot; the builder is empty afterwards.
  model_snapshot build(std::uint32_t sender, std::uint64_t incarnation,
                       std::int64_t version, std::int64_t send_time_ns);

 private:
  std::vector<tensor_entry> index_;
  // Uninitialized and recycled (writable_bytes::shareable): a vector
  // zero-filled every snapshot, and took fresh pages (a fault each) for
  // every model above glibc's mmap threshold.
  writable_bytes buf_;
  std::size_t used_ = 0;
  // checksum64 of buf_[0, used_), padding included (null: nothing added,
  // or unhashed_).
  std::unique_ptr<checksum64_stream> sum_;
  // More bytes than the builder hashes (model_snapshot.cpp, hash_limit).
  bool unhashed_ = false;
};

} // namespace dice
