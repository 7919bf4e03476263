// Internal to the data plane: what its sources share (data_plane.cpp: the
// plane's life and send queue; data_plane_io.cpp: blocking socket and TLS
// I/O; data_plane_setup.cpp: sessions and connections; data_plane_writer.cpp
// and data_plane_reader.cpp: the threads that move the bytes).
#pragma once

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/logging/sampler.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "net/data_meta.hpp"
#include "net/data_plane.hpp"
#include "net/data_wire.hpp"
#include "net/dialer.hpp"
#include "net/socket.hpp"

#include "caf/send.hpp"

#include "data_inbox.hpp"
#include "data_shm.hpp"
#include "data_tls.hpp"
#include <fcntl.h>
#include <openssl/err.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>

namespace dice::net {

namespace plane_detail {

// The counters the planes' threads bump (three of data_counters' fields are
// read from data_shm.cpp instead: segments_open, segments_pooled,
// shm_reused).
using atomic_counters = basic_data_counters<std::atomic<std::uint64_t>>;

// Writer jobs: a transfer, or a same-host control frame.
inline constexpr int job_transfer = 0;
inline constexpr int job_probe_ok = 1;
inline constexpr int job_release = 2;

/// The process-wide counters behind `data_stats()`.
atomic_counters& counters();

// Most sessions waiting for their data connections at once (one per
// connected peer is normal).
inline constexpr std::size_t max_sessions = 1024;

// How long a session may bind its data connections after the hello.
inline constexpr auto session_lifetime = std::chrono::seconds{30};

// Bytes read (and hashed while in cache) per recv call. Small, because a
// recv owns the socket while it copies: segments that arrive meanwhile
// wait in its backlog and the room it frees is announced when it returns,
// so the sender can stall on a window already free (the likely reason,
// not traced in the kernel); a small piece is also still in L1/L2 when it
// is hashed. Picked by measurement (remote_bench, binaries with
// 4 MiB and 64 KiB pieces alternately, ms a round, issue 25): 100 MB to
// one collector 35-64 -> 23-25, 6.8 MB to one 1.95-2.27 -> 1.69-2.13, to
// three (medians of 5 sets) 5.14 -> 4.83, 1 MB unchanged; 32 and 128 KiB
// were no better than 64.
inline constexpr std::size_t read_piece = std::size_t{64} << 10;

// Bytes hashed and then written per write call, picked by measurement
// (remote_bench, 6.8 MB to one collector, medians of 5 sets against raw
// TCP: a whole hash before the first byte 0.81x; pieces of 512 KiB 0.83x,
// 1 MiB 0.96x, 2 MiB 1.02-1.09x, 4 MiB 1.00x).
inline constexpr std::size_t write_piece = std::size_t{2} << 20;

void set_timeout(int fd, int option, caf::timespan x);
// Blocking from now on; both directions wait at most `timeout` (0: a read
// waits for ever).
void set_blocking(int fd, caf::timespan send_timeout,
                  caf::timespan recv_timeout);
caf::timespan left_until(deadline_clock::time_point deadline);
// One read from a blocking socket, through TLS when `ssl` is set: the
// number of bytes, 0 on an orderly close, -1 on an error or timeout.
long read_some(int fd, ssl_st* ssl, char* out, std::size_t n);
// Reads exactly `n` bytes: n on success, 0 on a close before the first
// byte, -1 on a close or error in the middle.
long read_exactly(int fd, ssl_st* ssl, char* out, std::size_t n);
// Writes the iovecs whole (blocking socket with a send timeout), through
// TLS when `ssl` is set (no writev there: one SSL_write per piece).
bool write_all(int fd, ssl_st* ssl, iovec* iov, int count);

} // namespace plane_detail

// A thread of the plane: OpenSSL writes with write(2), not send(2) with
// MSG_NOSIGNAL, so a peer gone mid-write would raise SIGPIPE and end the
// process; blocked in these threads it stays pending and harmless.
std::thread plane_thread(std::function<void()> fn);
/// Writes `bytes` whole (see plane_detail::write_all).
bool write_bytes(int fd, ssl_st* ssl, const std::string& bytes);

// One control session's key material. K is derived by the first bind
// (key_once), not in the hello: the X25519 agreement and the HMAC then run
// on a binding thread instead of the router's handler, on the connect path.
struct data_plane::session {
  std::uint32_t peer = 0;
  std::shared_ptr<const data_offer> mine;
  std::string their_pub;
  std::once_flag key_once;
  std::string key; // empty: the agreement failed (a low-order point)
  deadline_clock::time_point expires;
  std::uint8_t used = 0; // bit per direction
};

struct data_plane::out_link {
  struct job {
    int kind = plane_detail::job_transfer;
    std::uint64_t id = 0;
    std::shared_ptr<const data_item> item;
    // 0, or a relay round (always sent as a body).
    std::uint32_t tag = 0;
    // The header frame's order (data_plane::send).
    std::uint64_t order = 0;
  };
  std::uint32_t peer = 0;
  // The socket's number, for other threads to shut it down (under the
  // plane's mutex); its owner is the writer thread (run_writer's `fd`),
  // which closes it when it ends, so no other thread writes this field.
  int fd = -1;
  ssl_ptr ssl;
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<job> queue;
  bool dead = false;
  // The peer reads our memfds (it answered our probe).
  std::atomic<bool> same_host{false};
  // Segments the peer has not released yet.
  std::map<std::uint64_t, std::shared_ptr<shm_segment>> held;
};

struct data_plane::in_link {
  std::uint32_t peer = 0;
  // The socket's number, for other threads to shut it down; owned and
  // closed by the reader thread (run_reader's `fd`), as out_link::fd.
  int fd = -1;
  ssl_ptr ssl;
  std::uint64_t link_gen = 0;
  std::shared_ptr<data_budget> budget;
  // The acceptor's ack to write first (acceptor side), or the ack to read
  // and check first (dialer side); empty: none.
  std::string ack_out;
  std::string ack_in;
};

} // namespace dice::net
