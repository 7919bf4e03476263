#pragma once

// The data plane: bulk bytes (model snapshots) between two connected routers
// on their own TCP connections, beside CAF's BASP, which copies every
// message into its write buffer and runs every stream on one multiplexer
// thread (docs/storage.md has the profile). BASP keeps everything else.
//
// Setup rides on the router handshake, nothing to configure: the attacher's
// hello carries an ephemeral X25519 public key, the acceptor answers with
// its own, and both derive a session key K from the cluster secret, both
// node ids and the key exchange (net/data_auth.hpp). The attacher then
// dials the acceptor's one port twice on `channel::data` (the preamble's
// HMAC proves the cluster secret), starts TLS when the node's TLS is on
// (the control connection's certificate, key and CA; net/data_tls.hpp), and
// proves K over the connection's fresh preamble nonces (and TLS exporter),
// once to send and once to receive; the acceptor answers with its own proof.
// Each connection carries bytes one way only, so each has one reader or one
// writer thread. Wire after the preamble (and TLS handshake;
// net/data_wire.hpp): the dialer's bind frame, the acceptor's ack, then
// transfer frames (header + body, written with writev, or SSL_write under
// TLS, read straight into the destination buffer).
//
// A snapshot sent this way carries its header (topic, sender, the snapshot
// without its bytes) in a frame just before its bytes, with the number of
// messages its router had sent the peer over BASP before it. The receiving
// router routes it when the bytes arrive if it has handled that many from
// the peer, else once it has; either way the snapshot keeps its place
// among everything the peer sends (forwards, finish, done). Its BASP
// reference (topic, sender, transfer id, header) waits for the next BASP
// message to the peer, which it precedes, or goes with 63 others: a
// learner that only sends models sends none (actors/router_routing.cpp).
//
// Limits: a stranger without a valid proof of the control session gets
// nothing (the connection is closed without a byte written after the
// preamble or TLS handshake); a session binds once per direction, within
// 30 s, and is revoked when its control session ends; an announced transfer
// above `max_transfer_bytes` closes the connection; bytes received but not yet
// claimed are bounded per peer (`max_peer_bytes`: the reader stops reading,
// and TCP pushes back on the sender); a transfer cut short or with a wrong
// checksum is dropped whole, never delivered. When no data connection is up
// the router falls back to BASP chunks, with a warning and a counter.

#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/shared_bytes.hpp"
#include "dice/process/unique_fd.hpp"
#include "dice/security/auth.hpp"
#include "net/data_auth.hpp"
#include "net/data_counters.hpp"

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

struct ssl_st; // OpenSSL's SSL

namespace dice::net {

/// Frees an OpenSSL SSL object.
struct ssl_free_fn {
  void operator()(ssl_st* x) const noexcept;
};

/// A data connection's TLS state (null: plain TCP).
using ssl_ptr = std::unique_ptr<ssl_st, ssl_free_fn>;

/// Asks a data plane's inbox for the bytes of `(peer node, transfer)`;
/// answered with `shared_bytes` once they arrived, or an error.
using data_take_atom = caf::atom_constant<caf::atom("dataTake")>;

/// Asks a data plane's inbox for the first transfer tagged `tag` from `via`
/// or from `origin` (a relay round: `(data_take_tag_atom, via, origin,
/// tag)`); answered with `shared_bytes`, or an error when it does not come
/// in time or `origin` is lost.
using data_take_tag_atom = caf::atom_constant<caf::atom("dataTakeT")>;

/// Tells a data plane's inbox that relay round `tag` of `(via, origin)` is
/// settled: tagged bytes up to `tag` from either, now or later, are dropped.
using data_tag_done_atom = caf::atom_constant<caf::atom("dataTagD")>;

/// Settings of a node's data plane.
struct data_plane_config {
  /// This node's id.
  std::uint32_t node = 0;
  /// Cluster secret for the preamble (empty: none).
  std::string secret;
  /// The node's TLS files: when set, every data connection runs TLS with
  /// them (as the control connection does).
  tls_files tls;
  /// Deadline to open one data connection (connect, preamble, bind).
  caf::timespan connect_timeout = std::chrono::seconds{2};
  /// A write blocked this long fails the connection; a reference whose
  /// bytes have not arrived this long after the router asked is dropped.
  caf::timespan io_timeout = std::chrono::seconds{10};
  /// Largest transfer a peer may announce.
  std::uint64_t max_transfer_bytes = max_wire_bytes;
  /// Most bytes received from one peer and not yet claimed by the router.
  std::uint64_t max_peer_bytes = max_wire_bytes;
  /// Snapshots with fewer bytes stay on BASP (one message, no second trip).
  std::size_t min_bytes = std::size_t{256} << 10;
  /// Peers on this host get snapshots through a sealed memfd the sender
  /// writes once (net/data_shm.hpp); only a reference crosses the socket.
  bool same_host = true;
};

struct shm_segment;
struct shm_probe;
class data_tls;
class data_ready_table;

/// Bytes queued for one or more peers. Their checksum is the one they came
/// with (`shared_bytes::known_checksum`: built by snapshot_builder, or
/// verified by the reader that received them), else computed once, in
/// order, piece by piece, by whichever writer reaches a piece first (the
/// others find it done; none waits for a slower peer's writer); the
/// same-host segment is made once by the first writer that needs it.
class data_item {
 public:
  /// Wraps `bytes` (shared, not copied); `meta`: their snapshot header
  /// (net/data_meta.hpp), sent before them, or empty.
  explicit data_item(shared_bytes bytes, std::string meta = {});

  /// The snapshot header sent before the bytes (empty: none).
  const std::string& meta() const noexcept {
    return meta_;
  }

  /// checksum64 of `meta()`.
  std::uint64_t meta_checksum() const noexcept {
    return meta_sum_;
  }

  /// The bytes.
  const shared_bytes& bytes() const noexcept {
    return bytes_;
  }

  /// Hashes the bytes up to `end` unless done already (thread-safe; a
  /// writer calls it before writing the bytes below `end`).
  void hash_upto(std::size_t end) const;

  /// checksum64 of all the bytes (hashing what is left).
  std::uint64_t checksum() const;

  /// The bytes in a same-host memfd (thread-safe, written once; null if
  /// that failed).
  std::shared_ptr<shm_segment> segment() const;

 private:
  shared_bytes bytes_;
  std::string meta_;
  std::uint64_t meta_sum_ = 0;
  mutable std::mutex hash_mtx_;
  mutable std::unique_ptr<checksum64_stream> hash_; // null until first use
  mutable std::size_t hashed_ = 0;
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

  /// False only when TLS is asked for and its context cannot be built: the
  /// router then never offers or dials data connections.
  bool enabled() const noexcept {
    return enabled_;
  }

  /// True if data connections run TLS.
  bool tls() const noexcept {
    return tls_ != nullptr;
  }

  /// Settings.
  const data_plane_config& config() const noexcept {
    return cfg_;
  }

  /// The actor that answers `(data_take_atom, peer, transfer)`.
  const caf::actor& inbox() const noexcept {
    return inbox_;
  }

  /// The bytes of transfer `id` from `peer` if they arrived whole and nobody
  /// claimed them yet (taken: a second call gets nothing); else nullopt and
  /// the caller claims them from `inbox()`, which answers when they come.
  std::optional<shared_bytes> take_ready(std::uint32_t peer, std::uint64_t id);

  /// Waits until take_ready(peer, id) would find the bytes, at most
  /// `timeout` (for tests and tools; the router never waits).
  bool wait_ready(std::uint32_t peer, std::uint64_t id, caf::timespan timeout);

  /// Acceptor side, in the control session's hello: takes the attacher's
  /// public key `their_pub` and answers with this side's (empty if
  /// `their_pub` is malformed: no data plane for this session). Replaces
  /// any earlier session of `peer`.
  std::string accept_session(std::uint32_t peer, const std::string& their_pub);

  /// Attacher side: opens both data connections to `peer` at `host`:`port`
  /// in the background, proving the session of `mine` and `their_pub`; a
  /// failure is logged as a warning and counted, and the peer's snapshots
  /// stay on BASP.
  void dial(std::uint32_t peer, std::string host, std::uint16_t port,
            std::shared_ptr<const data_offer> mine, std::string their_pub);

  /// The listener's hand-over of a connection on `channel::data` (takes
  /// `fd`; never blocks the caller). `binding`: its preamble nonces.
  void accept(unique_fd fd, std::string where, std::string binding);

  /// Queues `item` for `peer`; its transfer id, or nullopt when no data
  /// connection to `peer` is up (the caller sends over BASP and calls
  /// `fell_back`). A nonzero `tag` (a relay round) travels in the header
  /// and always as a body, never as a same-host reference; the receiver
  /// claims it with `data_take_tag_atom`. `order`: the BASP messages the
  /// router sent to `peer` before this snapshot's reference (sent in the
  /// item's header frame, net/data_wire.hpp).
  std::optional<std::uint64_t> send(std::uint32_t peer,
                                    std::shared_ptr<const data_item> item,
                                    std::uint32_t tag = 0,
                                    std::uint64_t order = 0);

  /// Tells the inbox which router gets the headers of snapshots that
  /// arrive with one (`arrived_atom`); held weakly.
  void set_router(const caf::actor& router);

  /// Counts a snapshot for `peer` that went over BASP instead (warns once
  /// per peer and connection failure).
  void fell_back(std::uint32_t peer);

  /// Turns the same-host shortcut on or off for connections opened from
  /// now on (benchmarks compare both; default: `config().same_host`).
  void set_same_host(bool on) noexcept {
    same_host_ = on;
  }

  /// Sets `config().min_bytes` (benchmarks compare thresholds); call it
  /// before the first snapshot, as the router reads it unlocked.
  void set_min_bytes(std::size_t n) noexcept {
    cfg_.min_bytes = n;
  }
  /// True if a data connection to `peer` is up for sending.
  bool can_send(std::uint32_t peer) const;

  /// True if untagged snapshots to `peer` go through same-host segments.
  bool sends_same_host(std::uint32_t peer) const;

  /// Waits up to `timeout` until `peer` reads this process's segments (it
  /// answered the probe); true if it does.
  bool wait_same_host(std::uint32_t peer, caf::timespan timeout) const;

  /// Waits up to `timeout` until `peer` released every same-host segment
  /// sent to it; true if it did.
  bool wait_released(std::uint32_t peer, caf::timespan timeout) const;

  /// Waits up to `timeout` until `can_send(peer)` or opening it failed.
  bool wait_sendable(std::uint32_t peer, caf::timespan timeout) const;

  /// The peer is lost: revokes its session, closes its connections, drops
  /// what it sent and fails the router's open claims.
  void drop_peer(std::uint32_t peer);

  /// Closes everything and joins every thread (idempotent).
  void stop();

 private:
  struct session;
  struct out_link;
  struct in_link;
  // Where the last handle of same-host bytes sends their release: this
  // plane until it stops, then nowhere (bytes may outlive the plane).
  struct release_sink {
    void post(std::uint32_t peer, std::uint64_t id);
    std::mutex mtx;
    data_plane* plane = nullptr;
  };

  data_plane(caf::actor_system& sys, data_plane_config cfg);

  void spawn_thread(std::function<void()> fn);
  void bind_accepted(unique_fd fd, std::string where, std::string binding);
  bool dial_one(std::uint32_t peer, const std::string& host, std::uint16_t port,
                const std::string& key, std::uint8_t direction);
  void add_out(std::uint32_t peer, unique_fd fd, ssl_ptr ssl);
  void add_in(std::uint32_t peer, unique_fd fd, ssl_ptr ssl,
              std::string ack_out, std::string ack_in);
  // `fd`: the link's socket, which the thread closes when it ends.
  void run_writer(std::shared_ptr<out_link> link, unique_fd fd);
  void run_reader(std::shared_ptr<in_link> link, unique_fd fd);
  void warn_fallback(std::uint32_t peer, const std::string& why);
  // K of `s`, derived once by the first bind that needs it; empty when the
  // X25519 agreement failed.
  const std::string& session_key(session& s) const;
  // Makes the key pair the next accept_session answers with, if none.
  void refill_spare();
  void queue_control(std::uint32_t peer, int kind, std::uint64_t id);
  void on_probe_ok(std::uint32_t peer);
  void on_release(std::uint32_t peer, std::uint64_t id);

  data_plane_config cfg_;
  bool enabled_ = true;
  std::shared_ptr<data_tls> tls_;
  caf::actor inbox_;
  std::shared_ptr<data_ready_table> ready_;
  std::shared_ptr<release_sink> releases_;
  mutable std::mutex mtx_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  std::uint64_t next_transfer_ = 0;
  std::uint64_t next_link_gen_ = 0;
  std::map<std::uint32_t, std::shared_ptr<session>> sessions_;
  // A key pair made ahead for the next hello (under mtx_).
  std::shared_ptr<const data_offer> spare_;
  std::map<std::uint32_t, std::shared_ptr<out_link>> out_;
  std::map<std::uint32_t, std::shared_ptr<in_link>> in_;
  std::map<std::uint32_t, std::string> failed_;
  std::map<std::uint32_t, bool> warned_;
  // Accepted data connections still binding, for stop() to shut down; each
  // is owned by its binding thread (bind_accepted), not by this list.
  std::vector<int> pending_fds_;
  std::unique_ptr<shm_probe> probe_;
  std::atomic<bool> same_host_{true};
  std::set<std::uint32_t> probe_ok_;
  std::vector<std::thread> threads_;
};

} // namespace dice::net
