#pragma once

#include "dice/storage/storage.hpp"

namespace dice {

/// Settings of a storage or model loader (DI-engine's FileStorageLoader /
/// FileModelLoader(dirname, ttl)): where items go, how long they live.
struct loader_options : storage_options {
  /// Run the loader on its own thread (CAF `detached`): disk I/O and
  /// encoding never block the scheduler's workers. Ignored on CAF's test
  /// coordinator (deterministic mode), where every actor shares one thread.
  bool detached = true;
};

} // namespace dice
