#pragma once

// The data plane: bulk bytes (model snapshots) between two connected buses
// on their own TCP connections, beside CAF's BASP, which copies every
// message into its write buffer and runs every stream on one multiplexer
// thread (docs/storage.md has the profile). BASP keeps everything else.
//
// Setup rides on the bus handshake, nothing to configure: the attacher's
// hello says it can open data connections; the acceptor answers with a
// ticket (32 random bytes, bound to the attacher's node id and to this
// control session, single use per direction, expiring). The attacher then
// dials the acceptor's one port twice on `channel::data` (the preamble's
// HMAC proves the cluster secret) and presents the ticket, once to send and
// once to receive: each connection carries bytes one way only, so each has
// one reader or one writer thread. Wire after the preamble
// (net/data_wire.hpp): the dialer's bind frame, the acceptor's ack, then
// transfer frames (header + body, written with writev, read straight into
// the destination buffer).
//
// A snapshot sent this way is followed on BASP by a small reference (topic,
// sender, transfer id, the snapshot without its bytes); the receiving bus
// claims the bytes from `inbox()` in BASP order, so snapshots keep their
// order relative to everything else a peer sends (finish, done).
//
// Limits: a stranger without a valid ticket gets nothing (the connection is
// closed without a byte written); an announced transfer above
// `max_transfer_bytes` closes the connection; bytes received but not yet
// claimed are bounded per peer (`max_peer_bytes`: the reader stops reading,
// and TCP pushes back on the sender); a transfer cut short or with a wrong
// checksum is dropped whole, never delivered. When no data connection is up
// the bus falls back to BASP chunks, with a warning and a counter.

#include "dice/messages/shared_bytes.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/atom.hpp"
#include "caf/timespan.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dice::net {

/// Asks a data plane's inbox for the bytes of `(peer node, transfer)`;
/// answered with `shared_bytes` once they arrived, or an error.
using data_take_atom = caf::atom_constant<caf::atom("dataTake")>;

/// Settings of a node's data plane.
struct data_plane_config {
  /// This node's id.
  std::uint32_t node = 0;
  /// Cluster secret for the preamble (empty: none).
  std::string secret;
  /// TLS is on: bulk bytes then stay on BASP (TLS on the data connection is
  /// not implemented yet; see docs/distributed.md).
  bool tls = false;
  /// Deadline to open one data connection (connect, preamble, bind).
  caf::timespan connect_timeout = std::chrono::seconds{2};
  /// A write blocked this long fails the connection; a reference whose
  /// bytes have not arrived this long after the bus asked is dropped.
  caf::timespan io_timeout = std::chrono::seconds{10};
  /// Largest transfer a peer may announce.
  std::uint64_t max_transfer_bytes = max_wire_bytes;
  /// Most bytes received from one peer and not yet claimed by the bus.
  std::uint64_t max_peer_bytes = max_wire_bytes;
  /// Snapshots with fewer bytes stay on BASP (one message, no second trip).
  std::size_t min_bytes = std::size_t{1} << 20;
  /// Peers on this host get snapshots through a sealed memfd the sender
  /// writes once (net/data_shm.hpp); only a reference crosses the socket.
  bool same_host = true;
};

/// Process-wide counters of every data plane (tests and reports read them).
struct data_counters {
  /// Bytes written / read as transfer bodies.
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  /// Transfers written / received whole.
  std::uint64_t transfers_sent = 0;
  std::uint64_t transfers_received = 0;
  /// Snapshots that went over BASP although a data plane was on.
  std::uint64_t fallbacks = 0;
  /// Data connections refused (no or bad ticket, malformed bind).
  std::uint64_t refused = 0;
  /// Transfers dropped: cut short, bad checksum, malformed frame.
  std::uint64_t torn = 0;
  /// Announces above `max_transfer_bytes`.
  std::uint64_t oversize = 0;
  /// Data connections opened (both ends count).
  std::uint64_t links_opened = 0;
  /// Transfers sent / received as same-host references (a subset of
  /// transfers_sent / transfers_received).
  std::uint64_t shm_sent = 0;
  std::uint64_t shm_received = 0;
  /// Same-host segments this process holds open now.
  std::uint64_t segments_open = 0;
};

/// Current values of the process-wide counters.
data_counters data_stats() noexcept;

struct shm_segment;
struct shm_probe;

/// Bytes queued for one or more peers; the checksum (or, for same-host
/// peers, the shared-memory segment) is made once, by the first writer that
/// needs it.
class data_item {
 public:
  /// Wraps `bytes` (shared, not copied).
  explicit data_item(shared_bytes bytes) : bytes_(std::move(bytes)) {
    // nop
  }

  /// The bytes.
  const shared_bytes& bytes() const noexcept {
    return bytes_;
  }

  /// checksum64 of the bytes (thread-safe, computed once).
  std::uint64_t checksum() const;

  /// The bytes in a sealed memfd (thread-safe, written once; null if that
  /// failed).
  std::shared_ptr<shm_segment> segment() const;

 private:
  shared_bytes bytes_;
  mutable std::once_flag once_;
  mutable std::uint64_t sum_ = 0;
  mutable std::once_flag seg_once_;
  mutable std::shared_ptr<shm_segment> seg_;
};

/// A node's data connections to its peers (see the file comment).
class data_plane {
 public:
  /// Creates the plane and spawns its inbox actor in `sys`.
  static std::shared_ptr<data_plane> make(caf::actor_system& sys,
                                          data_plane_config cfg);

  data_plane(const data_plane&) = delete;
  data_plane& operator=(const data_plane&) = delete;

  /// Stops every connection and thread.
  ~data_plane();

  /// False under TLS: the bus then never offers or dials data connections.
  bool enabled() const noexcept {
    return !cfg_.tls;
  }

  /// Settings.
  const data_plane_config& config() const noexcept {
    return cfg_;
  }

  /// The actor that answers `(data_take_atom, peer, transfer)`.
  const caf::actor& inbox() const noexcept {
    return inbox_;
  }

  /// Acceptor side: a ticket for `peer`'s two data connections.
  std::string issue_ticket(std::uint32_t peer);

  /// Attacher side: opens both data connections to `peer` at `host`:`port`
  /// in the background; a failure is logged as a warning and counted, and
  /// the peer's snapshots stay on BASP.
  void dial(std::uint32_t peer, std::string host, std::uint16_t port,
            std::string ticket);

  /// The listener's hand-over of a connection on `channel::data` (takes
  /// `fd`; never blocks the caller).
  void accept(int fd, std::string where);

  /// Queues `item` for `peer`; its transfer id, or nullopt when no data
  /// connection to `peer` is up (the caller sends over BASP and calls
  /// `fell_back`).
  std::optional<std::uint64_t> send(std::uint32_t peer,
                                    std::shared_ptr<const data_item> item);

  /// Counts a snapshot for `peer` that went over BASP instead (warns once
  /// per peer and connection failure).
  void fell_back(std::uint32_t peer);

  /// Turns the same-host shortcut on or off for connections opened from
  /// now on (benchmarks compare both; default: `config().same_host`).
  void set_same_host(bool on) noexcept {
    same_host_ = on;
  }

  /// True if a data connection to `peer` is up for sending.
  bool can_send(std::uint32_t peer) const;

  /// Waits up to `timeout` until `peer` reads this process's segments (it
  /// answered the probe); true if it does.
  bool wait_same_host(std::uint32_t peer, caf::timespan timeout) const;

  /// Waits up to `timeout` until `peer` released every same-host segment
  /// sent to it; true if it did.
  bool wait_released(std::uint32_t peer, caf::timespan timeout) const;

  /// Waits up to `timeout` until `can_send(peer)` or opening it failed.
  bool wait_sendable(std::uint32_t peer, caf::timespan timeout) const;

  /// The peer is lost: closes its connections, drops what it sent and
  /// fails the bus's open claims.
  void drop_peer(std::uint32_t peer);

  /// Closes everything and joins every thread (idempotent).
  void stop();

 private:
  struct ticket;
  struct out_link;
  struct in_link;

  data_plane(caf::actor_system& sys, data_plane_config cfg);

  void spawn_thread(std::function<void()> fn);
  void bind_accepted(int fd, std::string where);
  void dial_one(std::uint32_t peer, const std::string& host, std::uint16_t port,
                const std::string& ticket, std::uint8_t direction);
  void add_out(std::uint32_t peer, int fd);
  void add_in(std::uint32_t peer, int fd, bool expect_ack);
  void run_writer(std::shared_ptr<out_link> link);
  void run_reader(std::shared_ptr<in_link> link);
  void warn_fallback(std::uint32_t peer, const std::string& why);
  void queue_control(std::uint32_t peer, int kind, std::uint64_t id);
  void on_probe_ok(std::uint32_t peer);
  void on_release(std::uint32_t peer, std::uint64_t id);

  data_plane_config cfg_;
  caf::actor inbox_;
  mutable std::mutex mtx_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  std::uint64_t next_transfer_ = 0;
  std::uint64_t next_epoch_ = 0;
  std::map<std::string, std::shared_ptr<ticket>> tickets_;
  std::map<std::uint32_t, std::shared_ptr<out_link>> out_;
  std::map<std::uint32_t, std::shared_ptr<in_link>> in_;
  std::map<std::uint32_t, std::string> failed_;
  std::map<std::uint32_t, bool> warned_;
  std::vector<int> pending_fds_;
  std::unique_ptr<shm_probe> probe_;
  std::atomic<bool> same_host_{true};
  std::set<std::uint32_t> probe_ok_;
  std::vector<std::thread> threads_;
};

} // namespace dice::net
