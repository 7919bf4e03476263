// The data plane's reader thread: one per incoming link.
#include "data_plane_impl.hpp"

namespace dice::net {

using namespace plane_detail;

void data_plane::run_reader(std::shared_ptr<in_link> link, unique_fd fd) {
  auto& c = counters();
  std::string why = "closed by the peer";
  // Sampled per peer: a member that keeps sending broken transfers is
  // refused every time but logged the first time and every 1024th after.
  static log::sampler sampled_torn;
  static log::sampler sampled_oversize;
  auto torn = [&](std::string what) {
    ++c.torn;
    why = std::move(what);
    if (auto n = sampled_torn.next(std::to_string(link->peer)))
      log::warning(cfg_.node,
                   "dropped a transfer from node " + std::to_string(link->peer)
                     + ": " + why + log::sampled_note(n));
  };
  std::uint64_t last_id = 0;
  pid_t peer_pid = 0;
  shm_views views; // unmapped when this link's reader ends
  char hdr[data_header_size];
  auto ssl = link->ssl.get();
  if (!link->ack_out.empty() && !write_bytes(link->fd, ssl, link->ack_out)) {
    fd.reset();
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
      fd.reset();
      caf::anon_send(inbox_, data_down_atom::value, link->peer, link->link_gen,
                     std::string{"refused"});
      return;
    }
    set_timeout(link->fd, SO_RCVTIMEO, caf::timespan{0});
  }
  // The snapshot header that came just before the next transfer or
  // reference (net/data_wire.hpp), and its order.
  std::string meta;
  std::uint64_t order = 0;
  for (;;) {
    auto k = read_exactly(link->fd, ssl, hdr, data_header_size);
    if (k == 0)
      break;
    if (k < 0) {
      torn("cut within a transfer header");
      break;
    }
    auto kind = frame_kind(hdr);
    if (!meta.empty() && kind != data_frame::reference
        && kind != data_frame::transfer) {
      torn("a snapshot header without its transfer");
      break;
    }
    if (kind == data_frame::header) {
      auto mf = decode_meta_frame(hdr);
      if (!mf || mf->size == 0 || mf->size > max_data_meta_bytes) {
        torn("malformed snapshot header frame");
        break;
      }
      meta.resize(mf->size);
      if (read_exactly(link->fd, ssl, meta.data(), meta.size())
          != static_cast<long>(meta.size())) {
        torn("cut within a snapshot header");
        break;
      }
      if (checksum64(meta.data(), meta.size()) != mf->checksum) {
        torn("checksum mismatch in a snapshot header");
        break;
      }
      order = mf->order;
      continue;
    }
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
      // No copy: the bytes are the mapping, released to the sender when
      // their last handle is gone (wherever that is; `releases` outlives
      // this plane's stop, after which releases go nowhere).
      auto buf = views.share(peer_pid, static_cast<int>(r->fd), r->tag, r->size,
                             [sink = releases_, peer = link->peer, id = r->id] {
                               sink->post(peer, id);
                             });
      if (!buf) {
        // Not shared: the sender may close its segment at once.
        queue_control(link->peer, job_release, r->id);
        link->budget->release(r->size);
        torn("same-host transfer " + std::to_string(r->id) + ": "
             + render(buf.error()));
        meta.clear();
        continue; // the connection itself is fine
      }
      c.bytes_received += r->size;
      ++c.transfers_received;
      ++c.shm_received;
      caf::anon_send(inbox_, data_ready_atom::value, link->peer, link->link_gen,
                     r->id, std::uint32_t{0}, std::move(*buf), order,
                     std::move(meta));
      meta.clear();
      continue;
    }
    auto h = decode_header(hdr, data_header_size);
    if (!h || h->id <= last_id || (h->tag != 0 && !meta.empty())) {
      torn("malformed transfer header");
      break;
    }
    if (h->size > cfg_.max_transfer_bytes || h->size > cfg_.max_peer_bytes) {
      ++c.oversize;
      count(trust_event::oversize);
      why = "announced " + std::to_string(h->size) + " bytes, more than "
        + std::to_string(std::min(cfg_.max_transfer_bytes, cfg_.max_peer_bytes))
        + " allowed";
      if (auto n = sampled_oversize.next(std::to_string(link->peer)))
        log::warning(cfg_.node,
                     "closed the data connection from node "
                       + std::to_string(link->peer) + ": " + why
                       + log::sampled_note(n));
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
    char trailer[data_trailer_size];
    bool whole = ok
      && read_exactly(link->fd, ssl, trailer, data_trailer_size)
        == static_cast<long>(data_trailer_size);
    auto digest = sum.digest();
    if (!whole || digest != decode_trailer(trailer)) {
      link->budget->release(h->size);
      torn(whole ? "checksum mismatch in transfer " + std::to_string(h->id)
             : ok
             ? "cut before the checksum of transfer " + std::to_string(h->id)
             : "cut after " + std::to_string(off) + " of "
               + std::to_string(h->size) + " bytes");
      break;
    }
    c.bytes_received += h->size;
    ++c.transfers_received;
    caf::anon_send(inbox_, data_ready_atom::value, link->peer, link->link_gen,
                   h->id, h->tag, shared_bytes{std::move(buf), digest}, order,
                   std::move(meta));
    meta.clear();
  }
  ::shutdown(fd.get(), SHUT_RDWR);
  fd.reset();
  caf::anon_send(inbox_, data_down_atom::value, link->peer, link->link_gen,
                 why);
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto i = in_.find(link->peer); i != in_.end() && i->second == link)
    in_.erase(i);
}

} // namespace dice::net
