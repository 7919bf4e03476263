#pragma once

#include "dice/storage/storage.hpp"

#include <cstddef>

namespace dice {

/// Settings of a storage or model loader (DI-engine's FileStorageLoader /
/// FileModelLoader(dirname, ttl)): where items go, how long they live.
struct loader_options : storage_options {
  /// Run the loader on its own thread (CAF `detached`): disk I/O and
  /// encoding never block the scheduler's workers. Ignored on CAF's test
  /// coordinator (deterministic mode), where every actor shares one thread.
  bool detached = true;
  /// A storage loader publishes a context delta whose trajectory and episode
  /// payload (payload_bytes) is below this many bytes inline, as the delta
  /// itself, instead of storing it: a segment or file per small delta cost
  /// more than its bytes (45,909 shm segments in a 60 s probe run). 0:
  /// every delta is stored. Model loaders always store.
  std::size_t inline_below = std::size_t{64} << 10;
};

} // namespace dice
