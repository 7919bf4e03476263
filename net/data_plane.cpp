#include "dice/net/data_plane.hpp"

#include "dice/security/auth.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/snapshot_chunk.hpp"
#include "dice/net/data_wire.hpp"
#include "dice/net/dialer.hpp"
#include "dice/net/socket.hpp"
#include "dice/security/trust.hpp"

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

namespace {

struct atomic_counters {
  std::atomic<std::uint64_t> bytes_sent{0};
  std::atomic<std::uint64_t> bytes_received{0};
  std::atomic<std::uint64_t> transfers_sent{0};
  std::atomic<std::uint64_t> transfers_received{0};
  std::atomic<std::uint64_t> fallbacks{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> torn{0};
  std::atomic<std::uint64_t> oversize{0};
  std::atomic<std::uint64_t> links_opened{0};
  std::atomic<std::uint64_t> shm_sent{0};
  std::atomic<std::uint64_t> shm_received{0};
};

// Writer jobs: a transfer, or a same-host control frame.
constexpr int job_transfer = 0;
constexpr int job_probe_ok = 1;
constexpr int job_release = 2;

atomic_counters& counters() {
  static atomic_counters x;
  return x;
}

// Most sessions waiting for their data connections at once (one per
// connected peer is normal).
constexpr std::size_t max_sessions = 1024;

// How long a session may bind its data connections after the hello.
constexpr auto session_lifetime = std::chrono::seconds{30};

// Bytes read (and hashed while in cache) per recv call.
constexpr std::size_t read_piece = std::size_t{4} << 20;

void set_timeout(int fd, int option, caf::timespan x) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(x).count();
  if (us <= 0 && x.count() > 0)
    us = 1; // 0 would mean "no timeout"
  timeval tv{static_cast<time_t>(us / 1000000),
             static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

// Blocking from now on; both directions wait at most `timeout` (0: a read
// waits for ever).
void set_blocking(int fd, caf::timespan send_timeout,
                  caf::timespan recv_timeout) {
  auto flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  set_timeout(fd, SO_SNDTIMEO, send_timeout);
  set_timeout(fd, SO_RCVTIMEO, recv_timeout);
}

caf::timespan left_until(deadline_clock::time_point deadline) {
  auto left = deadline - deadline_clock::now();
  return std::max(std::chrono::duration_cast<caf::timespan>(left),
                  caf::timespan{1});
}

// One read from a blocking socket, through TLS when `ssl` is set: the
// number of bytes, 0 on an orderly close, -1 on an error or timeout.
long read_some(int fd, ssl_st* ssl, char* out, std::size_t n) {
  if (ssl != nullptr) {
    auto k = SSL_read(ssl, out,
                      static_cast<int>(std::min<std::size_t>(n, INT_MAX)));
    if (k > 0)
      return k;
    auto err = SSL_get_error(ssl, k);
    ERR_clear_error();
    return err == SSL_ERROR_ZERO_RETURN ? 0 : -1;
  }
  for (;;) {
    auto k = ::recv(fd, out, n, 0);
    if (k < 0 && errno == EINTR)
      continue;
    return k;
  }
}

// Reads exactly `n` bytes: n on success, 0 on a close before the first
// byte, -1 on a close or error in the middle.
long read_exactly(int fd, ssl_st* ssl, char* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    auto k = read_some(fd, ssl, out + got, n - got);
    if (k <= 0)
      return got == 0 && k == 0 ? 0 : -1;
    got += static_cast<std::size_t>(k);
  }
  return static_cast<long>(n);
}

// Writes the iovecs whole (blocking socket with a send timeout), through
// TLS when `ssl` is set (no writev there: one SSL_write per piece).
bool write_all(int fd, ssl_st* ssl, iovec* iov, int count) {
  if (ssl != nullptr) {
    for (int i = 0; i < count; ++i) {
      auto p = static_cast<const char*>(iov[i].iov_base);
      auto left = iov[i].iov_len;
      while (left > 0) {
        auto n = static_cast<int>(std::min<std::size_t>(left, 1u << 30));
        auto k = SSL_write(ssl, p, n);
        if (k <= 0) {
          ERR_clear_error();
          return false;
        }
        p += k;
        left -= static_cast<std::size_t>(k);
      }
    }
    return true;
  }
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    auto k = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    auto left = static_cast<std::size_t>(k);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

} // namespace

data_counters data_stats() noexcept {
  auto& c = counters();
  data_counters x;
  x.bytes_sent = c.bytes_sent.load();
  x.bytes_received = c.bytes_received.load();
  x.transfers_sent = c.transfers_sent.load();
  x.transfers_received = c.transfers_received.load();
  x.fallbacks = c.fallbacks.load();
  x.refused = c.refused.load();
  x.torn = c.torn.load();
  x.oversize = c.oversize.load();
  x.links_opened = c.links_opened.load();
  x.shm_sent = c.shm_sent.load();
  x.shm_received = c.shm_received.load();
  x.segments_open = open_segments();
  x.segments_mapped = mapped_segments();
  return x;
}

std::uint64_t data_item::checksum() const {
  std::call_once(once_, [this] {
    sum_ = checksum64(bytes_.data(), bytes_.size());
  });
  return sum_;
}

std::shared_ptr<shm_segment> data_item::segment() const {
  std::call_once(seg_once_, [this] {
    seg_ = make_segment(bytes_.data(), bytes_.size());
  });
  return seg_;
}

// A thread of the plane: OpenSSL writes with write(2), not send(2) with
// MSG_NOSIGNAL, so a peer gone mid-write would raise SIGPIPE and end the
// process; blocked in these threads it stays pending and harmless.
std::thread plane_thread(std::function<void()> fn) {
  return std::thread{[fn = std::move(fn)] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    fn();
  }};
}

bool write_bytes(int fd, ssl_st* ssl, const std::string& bytes) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  return write_all(fd, ssl, &iov, 1);
}

struct data_plane::session {
  std::string key;
  deadline_clock::time_point expires;
  std::uint8_t used = 0; // bit per direction
};

struct data_plane::out_link {
  struct job {
    int kind = job_transfer;
    std::uint64_t id = 0;
    std::shared_ptr<const data_item> item;
  };
  std::uint32_t peer = 0;
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
  int fd = -1;
  ssl_ptr ssl;
  std::uint64_t link_gen = 0;
  std::shared_ptr<data_budget> budget;
  // The acceptor's ack to write first (acceptor side), or the ack to read
  // and check first (dialer side); empty: none.
  std::string ack_out;
  std::string ack_in;
};

std::shared_ptr<data_plane> data_plane::make(caf::actor_system& sys,
                                             data_plane_config cfg) {
  return std::shared_ptr<data_plane>{new data_plane(sys, std::move(cfg))};
}

data_plane::data_plane(caf::actor_system& sys, data_plane_config cfg)
  : cfg_(std::move(cfg)) {
  if (cfg_.tls.any()) {
    if (auto ctx = data_tls::make(cfg_.tls)) {
      tls_ = std::move(*ctx);
    } else {
      enabled_ = false;
      log::warning(cfg_.node,
                   render(ctx.error()) + "; snapshots travel over BASP");
    }
  }
  inbox_ = spawn_data_inbox(sys, cfg_.node, cfg_.io_timeout);
  same_host_ = cfg_.same_host;
  probe_ = make_probe();
}

data_plane::~data_plane() {
  stop();
}

void data_plane::spawn_thread(std::function<void()> fn) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (stopping_)
    return;
  threads_.push_back(plane_thread(std::move(fn)));
}

std::string data_plane::accept_session(std::uint32_t peer,
                                       const std::string& their_pub) {
  auto mine = data_offer::make();
  std::optional<std::string> dh;
  if (mine)
    dh = mine->agree(their_pub);
  if (!dh) {
    log::warning(cfg_.node,
                 "node " + std::to_string(peer)
                   + " offered a malformed data plane key; its "
                     "snapshots travel over BASP");
    return {};
  }
  auto s = std::make_shared<session>();
  s->key = data_session_key(cfg_.secret, cfg_.node, peer, their_pub,
                            mine->pub(), *dh);
  auto now = deadline_clock::now();
  s->expires = now + session_lifetime;
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto i = sessions_.begin(); i != sessions_.end();)
    if (i->second->expires < now)
      i = sessions_.erase(i);
    else
      ++i;
  if (sessions_.size() >= max_sessions && sessions_.count(peer) == 0)
    sessions_.erase(sessions_.begin());
  sessions_[peer] = std::move(s);
  return mine->pub();
}

void data_plane::accept(int fd, std::string where, std::string binding) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_) {
      ::close(fd);
      return;
    }
    pending_fds_.push_back(fd);
  }
  spawn_thread(
    [this, fd, where = std::move(where), binding = std::move(binding)] {
      bind_accepted(fd, where, binding);
    });
}

void data_plane::bind_accepted(int fd, std::string where, std::string binding) {
  auto done_pending = [&] {
    std::lock_guard<std::mutex> guard{mtx_};
    pending_fds_.erase(std::remove(pending_fds_.begin(), pending_fds_.end(),
                                   fd),
                       pending_fds_.end());
  };
  auto refuse = [&](const std::string& why) {
    done_pending();
    ++counters().refused;
    log::warning(cfg_.node,
                 "refused a data connection from " + where + ": " + why);
    // Not a byte back: a stranger learns nothing.
    ::close(fd);
  };
  auto deadline = deadline_clock::now() + cfg_.connect_timeout;
  set_blocking(fd, cfg_.connect_timeout, cfg_.connect_timeout);
  ssl_ptr ssl;
  std::string tls_b;
  if (tls_) {
    auto x = tls_->handshake(fd, true);
    if (!x)
      return refuse(render(x.error()));
    ssl = std::move(*x);
    tls_b = tls_binding(ssl.get());
    if (tls_b.empty())
      return refuse("no TLS exporter value");
    set_blocking(fd, left_until(deadline), left_until(deadline));
  }
  char raw[data_bind_size];
  if (read_exactly(fd, ssl.get(), raw, data_bind_size)
      != static_cast<long>(data_bind_size))
    return refuse("no bind frame");
  auto b = decode_bind(raw, data_bind_size);
  if (!b)
    return refuse("malformed bind frame");
  std::string ack;
  std::string why;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = sessions_.find(b->node);
    auto bit = static_cast<std::uint8_t>(1u << b->direction);
    if (i == sessions_.end())
      why = "no control session with node " + std::to_string(b->node);
    else if (i->second->expires < deadline_clock::now())
      why = "the session of node " + std::to_string(b->node) + " expired";
    else if (i->second->used & bit)
      why = "node " + std::to_string(b->node) + " already bound this direction";
    else if (binding.size() != 2 * preamble_nonce_size
             || !same_mac(b->mac,
                          data_bind_mac(i->second->key, b->direction, binding,
                                        tls_b)))
      why = "node " + std::to_string(b->node)
        + " did not prove this control session";
    if (why.empty()) {
      auto& s = *i->second;
      ack = encode_ack(
        data_ack_mac(s.key, b->direction, binding, tls_b, b->mac));
      s.used |= bit;
      if (s.used == 3)
        sessions_.erase(i);
    }
  }
  if (!why.empty()) {
    count(trust_event::auth_refused);
    return refuse(why);
  }
  done_pending();
  if (b->direction == data_dialer_writes) {
    // The inbox knows the link before the dialer may send a reference; the
    // reader writes the ack (one thread per SSL object).
    add_in(b->node, fd, std::move(ssl), std::move(ack), {});
    return;
  }
  if (!write_bytes(fd, ssl.get(), ack)) {
    ::close(fd);
    return;
  }
  add_out(b->node, fd, std::move(ssl));
}

void data_plane::dial(std::uint32_t peer, std::string host, std::uint16_t port,
                      std::shared_ptr<const data_offer> mine,
                      std::string their_pub) {
  spawn_thread([this, peer, host = std::move(host), port,
                mine = std::move(mine), their = std::move(their_pub)] {
    std::optional<std::string> dh;
    if (mine && enabled_)
      dh = mine->agree(their);
    if (!dh) {
      std::lock_guard<std::mutex> guard{mtx_};
      failed_[peer] = "node " + std::to_string(peer)
        + " answered with a malformed data plane key";
      changed_.notify_all();
      return;
    }
    auto key = data_session_key(cfg_.secret, peer, cfg_.node, mine->pub(),
                                their, *dh);
    dial_one(peer, host, port, key, data_acceptor_writes);
    dial_one(peer, host, port, key, data_dialer_writes);
  });
}

bool data_plane::dial_one(std::uint32_t peer, const std::string& host,
                          std::uint16_t port, const std::string& key,
                          std::uint8_t direction) {
  auto where = host + ":" + std::to_string(port);
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> guard{mtx_};
    failed_[peer] = "cannot open a data connection to " + where + ": " + why;
    changed_.notify_all();
    return false;
  };
  auto deadline = deadline_clock::now() + cfg_.connect_timeout;
  std::string binding;
  auto fd = dial_channel(cfg_.secret, host, port, channel::data, deadline,
                         &binding);
  if (!fd)
    return fail(render(fd.error()));
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_) {
      ::close(*fd);
      return false;
    }
  }
  set_blocking(*fd, left_until(deadline), left_until(deadline));
  ssl_ptr ssl;
  std::string tls_b;
  if (tls_) {
    auto x = tls_->handshake(*fd, false);
    if (!x) {
      ::close(*fd);
      return fail(render(x.error()));
    }
    ssl = std::move(*x);
    tls_b = tls_binding(ssl.get());
    if (tls_b.empty()) {
      ::close(*fd);
      return fail("no TLS exporter value");
    }
    set_blocking(*fd, left_until(deadline), left_until(deadline));
  }
  auto mac = data_bind_mac(key, direction, binding, tls_b);
  auto ack = data_ack_mac(key, direction, binding, tls_b, mac);
  if (!write_bytes(*fd, ssl.get(),
                   encode_bind(data_bind{direction, cfg_.node, mac}))) {
    ::close(*fd);
    return fail(std::string{"cannot send the bind frame: "}
                + std::strerror(errno));
  }
  if (direction == data_acceptor_writes) {
    // Registered first: the reader checks the ack, then reads transfers.
    add_in(peer, *fd, std::move(ssl), {}, std::move(ack));
    return true;
  }
  char raw[data_ack_size];
  auto got = read_exactly(*fd, ssl.get(), raw, data_ack_size)
      == static_cast<long>(data_ack_size)
    ? decode_ack(raw, data_ack_size)
    : std::nullopt;
  if (!got || !same_mac(*got, ack)) {
    ::close(*fd);
    if (got)
      count(trust_event::auth_refused);
    return fail(got ? "the peer did not prove this control session"
                    : "the peer refused the data connection");
  }
  add_out(peer, *fd, std::move(ssl));
  return true;
}

void data_plane::add_out(std::uint32_t peer, int fd, ssl_ptr ssl) {
  set_blocking(fd, cfg_.io_timeout, caf::timespan{0});
  auto link = std::make_shared<out_link>();
  link->peer = peer;
  link->fd = fd;
  link->ssl = std::move(ssl);
  auto tls = link->ssl != nullptr;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_) {
      ::close(fd);
      return;
    }
    if (auto i = out_.find(peer); i != out_.end()) {
      std::lock_guard<std::mutex> g2{i->second->mtx};
      i->second->dead = true;
      ::shutdown(i->second->fd, SHUT_RDWR);
      i->second->cv.notify_all();
    }
    if (probe_ok_.count(peer) > 0)
      link->queue.push_back(out_link::job{job_probe_ok, 0, nullptr});
    out_[peer] = link;
    failed_.erase(peer);
    warned_.erase(peer);
    changed_.notify_all();
    threads_.push_back(plane_thread([this, link] {
      run_writer(link);
    }));
  }
  ++counters().links_opened;
  log::debug(cfg_.node,
             "data connection to node " + std::to_string(peer)
               + " is up (sending" + (tls ? ", TLS)" : ")"));
}

void data_plane::add_in(std::uint32_t peer, int fd, ssl_ptr ssl,
                        std::string ack_out, std::string ack_in) {
  // Reads wait for ever once the ack is through (a quiet peer is fine);
  // until then the setup deadline set by the caller holds.
  set_blocking(fd, cfg_.io_timeout,
               ack_in.empty() ? caf::timespan{0} : cfg_.connect_timeout);
  auto link = std::make_shared<in_link>();
  link->peer = peer;
  link->fd = fd;
  link->ssl = std::move(ssl);
  link->ack_out = std::move(ack_out);
  link->ack_in = std::move(ack_in);
  link->budget = std::make_shared<data_budget>(cfg_.max_peer_bytes);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_) {
      ::close(fd);
      return;
    }
    link->link_gen = ++next_link_gen_;
    if (auto i = in_.find(peer); i != in_.end()) {
      ::shutdown(i->second->fd, SHUT_RDWR);
      i->second->budget->close();
    }
    in_[peer] = link;
    caf::anon_send(inbox_, data_up_atom::value, peer, link->link_gen,
                   link->budget);
    threads_.push_back(plane_thread([this, link] {
      run_reader(link);
    }));
  }
  ++counters().links_opened;
}

std::optional<std::uint64_t>
data_plane::send(std::uint32_t peer, std::shared_ptr<const data_item> item) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = out_.find(peer);
  if (i == out_.end())
    return std::nullopt;
  auto& link = *i->second;
  std::lock_guard<std::mutex> g2{link.mtx};
  if (link.dead)
    return std::nullopt;
  auto id = ++next_transfer_;
  link.queue.push_back(out_link::job{job_transfer, id, std::move(item)});
  link.cv.notify_one();
  return id;
}

void data_plane::queue_control(std::uint32_t peer, int kind, std::uint64_t id) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (kind == job_probe_ok)
    probe_ok_.insert(peer);
  auto i = out_.find(peer);
  if (i == out_.end())
    return; // probe ok: sent when the link comes up (add_out)
  std::lock_guard<std::mutex> g2{i->second->mtx};
  i->second->queue.push_back(out_link::job{kind, id, nullptr});
  i->second->cv.notify_one();
}

void data_plane::on_probe_ok(std::uint32_t peer) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto i = out_.find(peer); i != out_.end())
    i->second->same_host = true;
  changed_.notify_all();
}

bool data_plane::wait_same_host(std::uint32_t peer,
                                caf::timespan timeout) const {
  std::unique_lock<std::mutex> guard{mtx_};
  return changed_.wait_for(guard, timeout, [&] {
    auto i = out_.find(peer);
    return i != out_.end() && i->second->same_host;
  });
}

void data_plane::on_release(std::uint32_t peer, std::uint64_t id) {
  std::shared_ptr<shm_segment> seg;
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto i = out_.find(peer); i != out_.end()) {
    std::lock_guard<std::mutex> g2{i->second->mtx};
    auto j = i->second->held.find(id);
    if (j != i->second->held.end()) {
      seg = std::move(j->second);
      i->second->held.erase(j);
    }
  }
  seg.reset(); // closed before anyone is told it was released
  changed_.notify_all();
}

bool data_plane::wait_released(std::uint32_t peer,
                               caf::timespan timeout) const {
  std::unique_lock<std::mutex> guard{mtx_};
  return changed_.wait_for(guard, timeout, [&] {
    auto i = out_.find(peer);
    if (i == out_.end())
      return true;
    std::lock_guard<std::mutex> g2{i->second->mtx};
    return i->second->held.empty();
  });
}

bool data_plane::can_send(std::uint32_t peer) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = out_.find(peer);
  if (i == out_.end())
    return false;
  std::lock_guard<std::mutex> g2{i->second->mtx};
  return !i->second->dead;
}

bool data_plane::wait_sendable(std::uint32_t peer,
                               caf::timespan timeout) const {
  std::unique_lock<std::mutex> guard{mtx_};
  changed_.wait_for(guard, timeout, [&] {
    if (stopping_ || failed_.count(peer) > 0)
      return true;
    auto i = out_.find(peer);
    return i != out_.end();
  });
  auto i = out_.find(peer);
  if (i == out_.end())
    return false;
  std::lock_guard<std::mutex> g2{i->second->mtx};
  return !i->second->dead;
}

void data_plane::fell_back(std::uint32_t peer) {
  ++counters().fallbacks;
  std::string why;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = failed_.find(peer);
    if (i == failed_.end() || warned_[peer])
      return;
    warned_[peer] = true;
    why = i->second;
  }
  log::warning(cfg_.node,
               why + "; snapshots to node " + std::to_string(peer)
                 + " travel over BASP");
}

void data_plane::warn_fallback(std::uint32_t peer, const std::string& why) {
  std::lock_guard<std::mutex> guard{mtx_};
  failed_[peer] = why;
  warned_.erase(peer);
  changed_.notify_all();
}

void data_plane::run_writer(std::shared_ptr<out_link> link) {
  std::string why = "closed";
  auto send_frame = [&](const std::array<char, data_header_size>& f) {
    iovec iov{const_cast<char*>(f.data()), f.size()};
    return write_all(link->fd, link->ssl.get(), &iov, 1);
  };
  // Same host? The peer answers "probe ok" on its own connection if it can
  // read this token through /proc.
  if (probe_ && same_host_
      && !send_frame(encode_probe(
        data_probe{static_cast<std::uint32_t>(::getpid()),
                   static_cast<std::uint32_t>(probe_->fd), probe_->token})))
    why = "write failed";
  while (why == "closed") {
    out_link::job job;
    {
      std::unique_lock<std::mutex> guard{link->mtx};
      link->cv.wait(guard, [&] {
        return link->dead || !link->queue.empty();
      });
      if (link->dead)
        break;
      job = std::move(link->queue.front());
      link->queue.pop_front();
    }
    if (job.kind == job_probe_ok || job.kind == job_release) {
      if (!send_frame(job.kind == job_probe_ok ? encode_probe_ok()
                                               : encode_release(job.id)))
        why = std::string{"write failed: "} + std::strerror(errno);
      continue;
    }
    auto& bytes = job.item->bytes();
    if (link->same_host) {
      if (auto seg = job.item->segment()) {
        auto frame = encode_ref(data_ref{static_cast<std::uint32_t>(seg->fd),
                                         job.id, seg->size, seg->tag});
        {
          std::lock_guard<std::mutex> guard{link->mtx};
          if (link->dead)
            break;
          link->held.emplace(job.id, std::move(seg));
        }
        // From here the segment lives in `held` (and in items other peers
        // still queue): the release closes it, and the counters are right
        // before the peer can answer.
        job.item.reset();
        ++counters().shm_sent;
        ++counters().transfers_sent;
        if (!send_frame(frame)) {
          why = std::string{"write failed: "} + std::strerror(errno);
          break;
        }
        continue;
      }
    }
    auto hdr = encode_header(
      data_header{job.id, bytes.size(), job.item->checksum()});
    iovec iov[2];
    iov[0].iov_base = hdr.data();
    iov[0].iov_len = hdr.size();
    iov[1].iov_base = const_cast<std::uint8_t*>(bytes.data());
    iov[1].iov_len = bytes.size();
    if (!write_all(link->fd, link->ssl.get(), iov, bytes.size() > 0 ? 2 : 1)) {
      why = std::string{"write failed: "} + std::strerror(errno);
      break;
    }
    counters().bytes_sent += bytes.size();
    ++counters().transfers_sent;
  }
  {
    std::lock_guard<std::mutex> guard{link->mtx};
    link->dead = true;
    link->queue.clear();
    link->held.clear();
  }
  ::shutdown(link->fd, SHUT_RDWR);
  ::close(link->fd);
  bool stopping;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping = stopping_;
  }
  if (!stopping && why != "closed")
    warn_fallback(link->peer,
                  "the data connection to node " + std::to_string(link->peer)
                    + " failed (" + why + ")");
}

void data_plane::run_reader(std::shared_ptr<in_link> link) {
  auto& c = counters();
  std::string why = "closed by the peer";
  auto torn = [&](std::string what) {
    ++c.torn;
    why = std::move(what);
    log::warning(cfg_.node,
                 "dropped a transfer from node " + std::to_string(link->peer)
                   + ": " + why);
  };
  std::uint64_t last_id = 0;
  pid_t peer_pid = 0;
  char hdr[data_header_size];
  auto ssl = link->ssl.get();
  if (!link->ack_out.empty() && !write_bytes(link->fd, ssl, link->ack_out)) {
    ::close(link->fd);
    caf::anon_send(inbox_, data_down_atom::value, link->peer, link->link_gen,
                   std::string{"failed at the ack"});
    return;
  }
  if (!link->ack_in.empty()) {
    // The dialer's receiving side: the acceptor's ack comes first and
    // proves the session; a refused bind is a close without one.
    char ack[data_ack_size];
    auto k = read_exactly(link->fd, ssl, ack, data_ack_size);
    auto got = k == static_cast<long>(data_ack_size)
      ? decode_ack(ack, data_ack_size)
      : std::nullopt;
    if (!got || !same_mac(*got, link->ack_in)) {
      if (got)
        count(trust_event::auth_refused);
      warn_fallback(link->peer,
                    got ? "the peer did not prove this control session"
                        : "the peer refused the data connection");
      ::close(link->fd);
      caf::anon_send(inbox_, data_down_atom::value, link->peer, link->link_gen,
                     std::string{"refused"});
      return;
    }
    set_timeout(link->fd, SO_RCVTIMEO, caf::timespan{0});
  }
  for (;;) {
    auto k = read_exactly(link->fd, ssl, hdr, data_header_size);
    if (k == 0)
      break;
    if (k < 0) {
      torn("cut within a transfer header");
      break;
    }
    auto kind = frame_kind(hdr);
    if (kind == data_frame::probe) {
      auto pr = decode_probe(hdr);
      if (!pr) {
        torn("malformed probe");
        break;
      }
      if (same_host_
          && check_probe(static_cast<pid_t>(pr->pid), static_cast<int>(pr->fd),
                         pr->token)) {
        peer_pid = static_cast<pid_t>(pr->pid);
        queue_control(link->peer, job_probe_ok, 0);
      }
      continue;
    }
    if (kind == data_frame::probe_ok) {
      on_probe_ok(link->peer);
      continue;
    }
    if (kind == data_frame::release) {
      if (auto id = decode_release(hdr))
        on_release(link->peer, *id);
      continue;
    }
    if (kind == data_frame::reference) {
      auto r = decode_ref(hdr);
      if (!r || peer_pid == 0 || r->id <= last_id) {
        torn("unexpected same-host reference");
        break;
      }
      if (r->size > cfg_.max_transfer_bytes || r->size > cfg_.max_peer_bytes) {
        ++c.oversize;
        count(trust_event::oversize);
        why = "announced " + std::to_string(r->size) + " bytes";
        break;
      }
      last_id = r->id;
      if (!link->budget->acquire(r->size)) {
        why = "closed";
        break;
      }
      auto buf = read_segment(peer_pid, static_cast<int>(r->fd), r->tag,
                              r->size);
      // Read (or not): the sender may close its segment either way.
      queue_control(link->peer, job_release, r->id);
      if (!buf) {
        link->budget->release(r->size);
        torn("same-host transfer " + std::to_string(r->id) + ": "
             + render(buf.error()));
        continue; // the connection itself is fine
      }
      c.bytes_received += r->size;
      ++c.transfers_received;
      ++c.shm_received;
      caf::anon_send(inbox_, data_ready_atom::value, link->peer, link->link_gen,
                     r->id, shared_bytes{std::move(*buf)});
      continue;
    }
    auto h = decode_header(hdr, data_header_size);
    if (!h || h->id <= last_id) {
      torn("malformed transfer header");
      break;
    }
    if (h->size > cfg_.max_transfer_bytes || h->size > cfg_.max_peer_bytes) {
      ++c.oversize;
      count(trust_event::oversize);
      why = "announced " + std::to_string(h->size) + " bytes, more than "
        + std::to_string(std::min(cfg_.max_transfer_bytes, cfg_.max_peer_bytes))
        + " allowed";
      log::warning(cfg_.node,
                   "closed the data connection from node "
                     + std::to_string(link->peer) + ": " + why);
      break;
    }
    last_id = h->id;
    if (!link->budget->acquire(h->size)) {
      why = "closed";
      break;
    }
    writable_bytes buf;
    try {
      buf = writable_bytes{static_cast<std::size_t>(h->size)};
    } catch (const std::bad_alloc&) {
      link->budget->release(h->size);
      torn("cannot allocate " + std::to_string(h->size) + " bytes");
      break;
    }
    checksum64_stream sum;
    std::uint64_t off = 0;
    bool ok = true;
    while (off < h->size) {
      auto want = static_cast<std::size_t>(
        std::min<std::uint64_t>(read_piece, h->size - off));
      auto n = read_some(link->fd, ssl,
                         reinterpret_cast<char*>(buf.data()) + off, want);
      if (n <= 0) {
        ok = false;
        break;
      }
      sum.update(buf.data() + off, static_cast<std::size_t>(n));
      off += static_cast<std::uint64_t>(n);
    }
    if (!ok || sum.digest() != h->checksum) {
      link->budget->release(h->size);
      torn(ok ? "checksum mismatch in transfer " + std::to_string(h->id)
              : "cut after " + std::to_string(off) + " of "
               + std::to_string(h->size) + " bytes");
      break;
    }
    c.bytes_received += h->size;
    ++c.transfers_received;
    caf::anon_send(inbox_, data_ready_atom::value, link->peer, link->link_gen,
                   h->id, shared_bytes{std::move(buf)});
  }
  ::shutdown(link->fd, SHUT_RDWR);
  ::close(link->fd);
  caf::anon_send(inbox_, data_down_atom::value, link->peer, link->link_gen, why);
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto i = in_.find(link->peer); i != in_.end() && i->second == link)
    in_.erase(i);
}

void data_plane::drop_peer(std::uint32_t peer) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto i = out_.find(peer); i != out_.end()) {
      std::lock_guard<std::mutex> g2{i->second->mtx};
      i->second->dead = true;
      i->second->held.clear();
      i->second->queue.clear();
      ::shutdown(i->second->fd, SHUT_RDWR);
      i->second->cv.notify_all();
      out_.erase(i);
    }
    if (auto i = in_.find(peer); i != in_.end()) {
      ::shutdown(i->second->fd, SHUT_RDWR);
      i->second->budget->close();
      in_.erase(i);
    }
    sessions_.erase(peer);
    failed_.erase(peer);
    warned_.erase(peer);
    probe_ok_.erase(peer);
  }
  caf::anon_send(inbox_, data_drop_atom::value, peer);
}

void data_plane::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!stopping_) {
      stopping_ = true;
      changed_.notify_all();
      for (auto& [peer, link] : out_) {
        std::lock_guard<std::mutex> g2{link->mtx};
        link->dead = true;
        ::shutdown(link->fd, SHUT_RDWR);
        link->cv.notify_all();
      }
      for (auto& [peer, link] : in_) {
        ::shutdown(link->fd, SHUT_RDWR);
        link->budget->close();
      }
      for (auto fd : pending_fds_)
        ::shutdown(fd, SHUT_RDWR);
      caf::anon_send_exit(inbox_, caf::exit_reason::user_shutdown);
    }
    threads.swap(threads_);
  }
  for (auto& t : threads)
    if (t.joinable())
      t.join();
}

} // namespace dice::net
