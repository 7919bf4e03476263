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
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

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

/// Whole untagged transfers the inbox holds until the router claims them,
/// behind a mutex instead of the inbox's mailbox: the router takes bytes
/// that already arrived at once (`data_plane::take_ready`), without a
/// request, a response and a request timeout on CAF's clock thread; it asks
/// the inbox only for bytes still on their way. Only the inbox puts bytes
/// here (after its checks of the link), so a lost peer's are never found.
class data_ready_table {
 public:
  /// Holds `bytes` of transfer `id` from `peer` (counted in `budget`).
  void put(std::uint32_t peer, std::uint64_t id, shared_bytes bytes,
           std::shared_ptr<data_budget> budget);

  /// The bytes of `(peer, id)`, taken (their budget released), if here.
  std::optional<shared_bytes> take(std::uint32_t peer, std::uint64_t id);

  /// Drops every transfer of `peer`, releasing their budget.
  void drop(std::uint32_t peer);

  /// Waits until the bytes of `(peer, id)` are here, at most `timeout`;
  /// takes nothing.
  bool wait(std::uint32_t peer, std::uint64_t id, caf::timespan timeout);

 private:
  struct entry {
    shared_bytes bytes;
    std::shared_ptr<data_budget> budget;
  };
  std::mutex mtx_;
  std::condition_variable put_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, entry> ready_;
};

/// A reader's link to `peer` is up (link_gen identifies the link).
using data_up_atom = caf::atom_constant<caf::atom("dataUp")>;
/// A reader received a whole transfer.
using data_ready_atom = caf::atom_constant<caf::atom("dataReady")>;
/// A reader's link ended.
using data_down_atom = caf::atom_constant<caf::atom("dataDown")>;
/// The peer is lost: drop everything of it.
using data_drop_atom = caf::atom_constant<caf::atom("dataDrop")>;
/// The router that gets `arrived_atom` (its address: held weakly).
using data_router_atom = caf::atom_constant<caf::atom("dataRoutr")>;
/// Claims may have waited too long: the inbox checks their deadlines.
using data_expire_atom = caf::atom_constant<caf::atom("dataExpire")>;

/// Spawns the inbox of node `node`; claims wait at most `timeout`; whole
/// transfers nobody waits for go to `ready`.
caf::actor spawn_data_inbox(caf::actor_system& sys, std::uint32_t node,
                            caf::timespan timeout,
                            std::shared_ptr<data_ready_table> ready);

} // namespace dice::net

// Local only: a reader hands its link's budget to the inbox (never
// serialized; a remote message cannot carry it).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<dice::net::data_budget>)
