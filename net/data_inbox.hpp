#pragma once

// Internal to the data plane: the actor that pairs bytes read from a data
// connection with the router's claims for them (net/data_plane.hpp), and the
// per-peer byte budget its readers wait on.

#include "dice/messages/shared_bytes.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/allowed_unsafe_message_type.hpp"
#include "caf/atom.hpp"
#include "caf/timespan.hpp"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace dice::net {

/// Bytes received from one peer and not yet claimed: a reader acquires
/// before it allocates, the inbox releases when the router claims or drops.
class data_budget {
 public:
  /// At most `cap` bytes at once.
  explicit data_budget(std::uint64_t cap) : cap_(cap) {
    // nop
  }

  /// Waits until `n` more bytes fit; false once closed.
  bool acquire(std::uint64_t n);

  /// Returns `n` bytes.
  void release(std::uint64_t n);

  /// Wakes and fails every waiting `acquire`, now and later.
  void close();

  /// Bytes held now.
  std::uint64_t used() const;

 private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::uint64_t cap_;
  std::uint64_t used_ = 0;
  bool closed_ = false;
};

/// A reader's link to `peer` is up (link_gen identifies the link).
using data_up_atom = caf::atom_constant<caf::atom("dataUp")>;
/// A reader received a whole transfer.
using data_ready_atom = caf::atom_constant<caf::atom("dataReady")>;
/// A reader's link ended.
using data_down_atom = caf::atom_constant<caf::atom("dataDown")>;
/// The peer is lost: drop everything of it.
using data_drop_atom = caf::atom_constant<caf::atom("dataDrop")>;
/// A claim waited too long.
using data_expire_atom = caf::atom_constant<caf::atom("dataExpire")>;

/// Spawns the inbox of node `node`; claims wait at most `timeout`.
caf::actor spawn_data_inbox(caf::actor_system& sys, std::uint32_t node,
                            caf::timespan timeout);

} // namespace dice::net

// Local only: a reader hands its link's budget to the inbox (never
// serialized; a remote message cannot carry it).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<dice::net::data_budget>)
