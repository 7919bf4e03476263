// The data plane's connections: sessions keyed in the router's hello,
// accepting and binding data connections, dialing them, starting their links.
#include "data_plane_impl.hpp"

namespace dice::net {

using namespace plane_detail;

std::string data_plane::accept_session(std::uint32_t peer,
                                       const std::string& their_pub) {
  // The key pair was made ahead (spare_) and K is derived by the first
  // bind (session_key): neither runs in the router's handler, which the
  // attacher waits on to count the peer connected.
  std::shared_ptr<const data_offer> mine;
  if (their_pub.size() == data_key_size) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      mine = std::move(spare_);
    }
    if (!mine)
      mine = data_offer::make();
  }
  if (!mine) {
    static log::sampler sampled;
    if (auto n = sampled.next(std::to_string(peer)))
      log::warning(cfg_.node,
                   "node " + std::to_string(peer)
                     + " offered a malformed data plane key; its "
                       "snapshots travel over BASP"
                     + log::sampled_note(n));
    return {};
  }
  auto s = std::make_shared<session>();
  s->peer = peer;
  s->mine = mine;
  s->their_pub = their_pub;
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

const std::string& data_plane::session_key(session& s) const {
  std::call_once(s.key_once, [&] {
    // Fails for a low-order point: K stays empty and no MAC verifies.
    if (auto dh = s.mine->agree(s.their_pub))
      s.key = data_session_key(cfg_.secret, cfg_.node, s.peer, s.their_pub,
                               s.mine->pub(), *dh);
  });
  return s.key;
}

void data_plane::refill_spare() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (spare_ || stopping_)
      return;
  }
  auto made = data_offer::make();
  std::lock_guard<std::mutex> guard{mtx_};
  if (!spare_)
    spare_ = std::move(made);
}

void data_plane::accept(unique_fd fd, std::string where, std::string binding) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_)
      return; // closes `fd`
    pending_fds_.push_back(fd.get());
  }
  // std::function copies its callable: the fd travels in a shared owner,
  // so it also closes if the thread never starts (the plane stopped).
  auto owner = std::make_shared<unique_fd>(std::move(fd));
  spawn_thread(
    [this, owner, where = std::move(where), binding = std::move(binding)] {
      bind_accepted(std::move(*owner), where, binding);
    });
}

void data_plane::bind_accepted(unique_fd fd, std::string where,
                               std::string binding) {
  auto done_pending = [&, raw = fd.get()] {
    std::lock_guard<std::mutex> guard{mtx_};
    pending_fds_.erase(std::remove(pending_fds_.begin(), pending_fds_.end(),
                                   raw),
                       pending_fds_.end());
  };
  // Logged the first time and every 1024th after, per kind and source
  // host: a secret holder repeating a bad bind cannot flood the log.
  static log::sampler sampled;
  auto refuse = [&](const char* kind, const std::string& why) {
    done_pending();
    ++counters().refused;
    if (auto n = sampled.next(std::string{kind} + '|' + log::host_of(where)))
      log::warning(cfg_.node,
                   "refused a data connection from " + where + ": " + why
                     + log::sampled_note(n));
    // Not a byte back: a stranger learns nothing.
    fd.reset();
  };
  auto deadline = deadline_clock::now() + cfg_.connect_timeout;
  set_blocking(fd.get(), cfg_.connect_timeout, cfg_.connect_timeout);
  ssl_ptr ssl;
  std::string tls_b;
  if (tls_) {
    auto x = tls_->handshake(fd.get(), true);
    if (!x)
      return refuse("tls", render(x.error()));
    ssl = std::move(*x);
    tls_b = tls_binding(ssl.get());
    if (tls_b.empty())
      return refuse("tls", "no TLS exporter value");
    set_blocking(fd.get(), left_until(deadline), left_until(deadline));
  }
  char raw[data_bind_size];
  if (read_exactly(fd.get(), ssl.get(), raw, data_bind_size)
      != static_cast<long>(data_bind_size))
    return refuse("bind", "no bind frame");
  auto b = decode_bind(raw, data_bind_size);
  if (!b)
    return refuse("bind", "malformed bind frame");
  std::string ack;
  std::string why;
  std::shared_ptr<session> s;
  auto bit = static_cast<std::uint8_t>(1u << b->direction);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = sessions_.find(b->node);
    if (i == sessions_.end())
      why = "no control session with node " + std::to_string(b->node);
    else if (i->second->expires < deadline_clock::now())
      why = "the session of node " + std::to_string(b->node) + " expired";
    else if (i->second->used & bit)
      why = "node " + std::to_string(b->node) + " already bound this direction";
    else
      s = i->second;
  }
  if (why.empty()) {
    // Outside the plane's lock: the agreement takes tens of microseconds.
    const auto& key = session_key(*s);
    if (key.empty() || binding.size() != 2 * preamble_nonce_size
        || !same_mac(b->mac, data_bind_mac(key, b->direction, binding, tls_b)))
      why = "node " + std::to_string(b->node)
        + " did not prove this control session";
  }
  if (why.empty()) {
    std::lock_guard<std::mutex> guard{mtx_};
    // The session may have ended (peer lost, a new hello) or this
    // direction been bound by a racing bind since the check above.
    auto i = sessions_.find(b->node);
    if (i == sessions_.end() || i->second != s)
      why = "the session of node " + std::to_string(b->node) + " ended";
    else if (s->used & bit)
      why = "node " + std::to_string(b->node) + " already bound this direction";
    else {
      ack = encode_ack(
        data_ack_mac(s->key, b->direction, binding, tls_b, b->mac));
      s->used |= bit;
      if (s->used == 3)
        sessions_.erase(i);
    }
  }
  if (!why.empty()) {
    count(trust_event::auth_refused);
    return refuse("proof", why);
  }
  done_pending();
  if (b->direction == data_dialer_writes) {
    // The inbox knows the link before the dialer may send a reference; the
    // reader writes the ack (one thread per SSL object).
    add_in(b->node, std::move(fd), std::move(ssl), std::move(ack), {});
  } else if (write_bytes(fd.get(), ssl.get(), ack)) {
    add_out(b->node, std::move(fd), std::move(ssl));
  }
  // The next hello's key pair, made here rather than in the router, and
  // once this bind's ack is on its way (about 30 us the dialer need not
  // wait for).
  refill_spare();
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
  auto dialed = dial_channel(cfg_.secret, host, port, channel::data, deadline,
                             &binding);
  if (!dialed)
    return fail(render(dialed.error()));
  // Every failure below closes the socket with `fd`.
  auto fd = std::move(*dialed);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_)
      return false;
  }
  set_blocking(fd.get(), left_until(deadline), left_until(deadline));
  ssl_ptr ssl;
  std::string tls_b;
  if (tls_) {
    auto x = tls_->handshake(fd.get(), false);
    if (!x) {
      fd.reset();
      return fail(render(x.error()));
    }
    ssl = std::move(*x);
    tls_b = tls_binding(ssl.get());
    if (tls_b.empty()) {
      fd.reset();
      return fail("no TLS exporter value");
    }
    set_blocking(fd.get(), left_until(deadline), left_until(deadline));
  }
  auto mac = data_bind_mac(key, direction, binding, tls_b);
  auto ack = data_ack_mac(key, direction, binding, tls_b, mac);
  if (!write_bytes(fd.get(), ssl.get(),
                   encode_bind(data_bind{direction, cfg_.node, mac}))) {
    auto why = std::string{"cannot send the bind frame: "}
      + std::strerror(errno);
    fd.reset();
    return fail(why);
  }
  if (direction == data_acceptor_writes) {
    // Registered first: the reader checks the ack, then reads transfers.
    add_in(peer, std::move(fd), std::move(ssl), {}, std::move(ack));
    return true;
  }
  char raw[data_ack_size];
  auto got = read_exactly(fd.get(), ssl.get(), raw, data_ack_size)
      == static_cast<long>(data_ack_size)
    ? decode_ack(raw, data_ack_size)
    : std::nullopt;
  if (!got || !same_mac(*got, ack)) {
    fd.reset();
    if (got)
      count(trust_event::auth_refused);
    return fail(got ? "the peer did not prove this control session"
                    : "the peer refused the data connection");
  }
  add_out(peer, std::move(fd), std::move(ssl));
  return true;
}

void data_plane::add_out(std::uint32_t peer, unique_fd fd, ssl_ptr ssl) {
  set_blocking(fd.get(), cfg_.io_timeout, caf::timespan{0});
  auto link = std::make_shared<out_link>();
  link->peer = peer;
  link->fd = fd.get();
  link->ssl = std::move(ssl);
  auto tls = link->ssl != nullptr;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_)
      return; // closes `fd`
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
    // The writer thread owns the socket from here (see accept).
    auto owner = std::make_shared<unique_fd>(std::move(fd));
    threads_.push_back(plane_thread([this, link, owner] {
      run_writer(link, std::move(*owner));
    }));
  }
  ++counters().links_opened;
  log::debug(cfg_.node,
             "data connection to node " + std::to_string(peer)
               + " is up (sending" + (tls ? ", TLS)" : ")"));
}

void data_plane::add_in(std::uint32_t peer, unique_fd fd, ssl_ptr ssl,
                        std::string ack_out, std::string ack_in) {
  // Reads wait for ever once the ack is through (a quiet peer is fine);
  // until then the setup deadline set by the caller holds.
  set_blocking(fd.get(), cfg_.io_timeout,
               ack_in.empty() ? caf::timespan{0} : cfg_.connect_timeout);
  auto link = std::make_shared<in_link>();
  link->peer = peer;
  link->fd = fd.get();
  link->ssl = std::move(ssl);
  link->ack_out = std::move(ack_out);
  link->ack_in = std::move(ack_in);
  link->budget = std::make_shared<data_budget>(cfg_.max_peer_bytes);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopping_)
      return; // closes `fd`
    link->link_gen = ++next_link_gen_;
    if (auto i = in_.find(peer); i != in_.end()) {
      ::shutdown(i->second->fd, SHUT_RDWR);
      i->second->budget->close();
    }
    in_[peer] = link;
    caf::anon_send(inbox_, data_up_atom::value, peer, link->link_gen,
                   link->budget);
    // The reader thread owns the socket from here (see accept).
    auto owner = std::make_shared<unique_fd>(std::move(fd));
    threads_.push_back(plane_thread([this, link, owner] {
      run_reader(link, std::move(*owner));
    }));
  }
  ++counters().links_opened;
}

} // namespace dice::net
