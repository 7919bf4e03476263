#pragma once

#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <string>

namespace dice {

/// Where a storage reference points.
enum class storage_kind : std::uint8_t {
  /// A file on a filesystem the receiver can read.
  file,
  /// A POSIX shared-memory segment on the sender's host.
  shm,
};

/// A handle to data kept outside the message (DI-engine's `Storage`): only
/// this travels on the router; a loader on the receiving side reads the bytes.
struct storage_ref {
  /// File or shared memory.
  storage_kind kind = storage_kind::file;
  /// Path of the file, or name of the shared-memory segment.
  std::string path;
  /// Host the data lives on (shared memory is local to it).
  std::string host;
  /// Number of bytes stored.
  std::uint64_t size = 0;
  /// Checksum of the stored bytes (0: not computed).
  std::uint64_t checksum = 0;
  /// Node that stored the data.
  std::uint32_t origin = 0;
};

/// Field-wise equality.
bool operator==(const storage_ref& x, const storage_ref& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, storage_ref& x) {
  return f(caf::meta::type_name("dice::storage_ref"), x.kind, x.path, x.host,
           x.size, x.checksum, x.origin);
}

} // namespace dice
