#include "net/data_plane.hpp"

#include "data_plane_impl.hpp"

namespace dice::net {

using namespace plane_detail;

namespace plane_detail {

atomic_counters& counters() {
  static atomic_counters x;
  return x;
}

} // namespace plane_detail

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
  x.segments_pooled = pooled_segments();
  x.shm_reused = reused_segments();
  x.shm_borrowed = borrowed_segments();
  x.relay_rounds = c.relay_rounds.load();
  x.relay_forwarded = c.relay_forwarded.load();
  x.relay_fallbacks = c.relay_fallbacks.load();
  x.relay_mismatches = c.relay_mismatches.load();
  x.routed_on_arrival = c.routed_on_arrival.load();
  return x;
}

void count_routed_on_arrival() noexcept {
  ++counters().routed_on_arrival;
}

void count_relay(relay_counter which) noexcept {
  auto& c = counters();
  switch (which) {
    case relay_counter::round: ++c.relay_rounds; break;
    case relay_counter::forwarded: ++c.relay_forwarded; break;
    case relay_counter::fallback: ++c.relay_fallbacks; break;
    case relay_counter::mismatch: ++c.relay_mismatches; break;
  }
}

data_item::data_item(shared_bytes bytes, std::string meta)
  : bytes_(std::move(bytes)), meta_(std::move(meta)) {
  if (!meta_.empty())
    meta_sum_ = checksum64(meta_.data(), meta_.size());
}

void data_item::hash_upto(std::size_t end) const {
  if (bytes_.known_checksum())
    return; // hashed where they were built (or verified where received)
  std::lock_guard<std::mutex> guard{hash_mtx_};
  if (!hash_)
    hash_ = std::make_unique<checksum64_stream>();
  end = std::min(end, bytes_.size());
  if (end > hashed_) {
    hash_->update(bytes_.data() + hashed_, end - hashed_);
    hashed_ = end;
  }
}

std::uint64_t data_item::checksum() const {
  if (auto known = bytes_.known_checksum())
    return *known;
  hash_upto(bytes_.size());
  std::lock_guard<std::mutex> guard{hash_mtx_};
  return hash_->digest();
}

std::shared_ptr<shm_segment> data_item::segment() const {
  std::call_once(seg_once_, [this] {
    // Bytes built in a memfd are shared as they are; others are copied in.
    seg_ = share_block(bytes_);
    if (!seg_)
      seg_ = make_segment(bytes_.data(), bytes_.size());
  });
  return seg_;
}

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
  ready_ = std::make_shared<data_ready_table>();
  releases_ = std::make_shared<release_sink>();
  releases_->plane = this;
  inbox_ = spawn_data_inbox(sys, cfg_.node, cfg_.io_timeout, ready_);
  same_host_ = cfg_.same_host;
  probe_ = make_probe();
  if (enabled_)
    spare_ = data_offer::make();
}

void data_plane::set_router(const caf::actor& router) {
  caf::anon_send(inbox_, data_router_atom::value,
                 caf::actor_cast<caf::actor_addr>(router));
}

std::optional<shared_bytes> data_plane::take_ready(std::uint32_t peer,
                                                   std::uint64_t id) {
  return ready_->take(peer, id);
}

bool data_plane::wait_ready(std::uint32_t peer, std::uint64_t id,
                            caf::timespan timeout) {
  return ready_->wait(peer, id, timeout);
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

std::optional<std::uint64_t>
data_plane::send(std::uint32_t peer, std::shared_ptr<const data_item> item,
                 std::uint32_t tag, std::uint64_t order) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = out_.find(peer);
  if (i == out_.end())
    return std::nullopt;
  auto& link = *i->second;
  std::lock_guard<std::mutex> g2{link.mtx};
  if (link.dead)
    return std::nullopt;
  auto id = ++next_transfer_;
  link.queue.push_back(
    out_link::job{job_transfer, id, std::move(item), tag, order});
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

bool data_plane::sends_same_host(std::uint32_t peer) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = out_.find(peer);
  return i != out_.end() && i->second->same_host;
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

void data_plane::drop_peer(std::uint32_t peer) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto i = out_.find(peer); i != out_.end()) {
      std::lock_guard<std::mutex> g2{i->second->mtx};
      i->second->dead = true;
      drop_held(i->second->held); // the lost peer may still read them
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

void data_plane::release_sink::post(std::uint32_t peer, std::uint64_t id) {
  std::lock_guard<std::mutex> guard{mtx};
  if (plane != nullptr)
    plane->queue_control(peer, job_release, id);
}

void data_plane::stop() {
  {
    // Before the plane's own lock: a release posts under this one, then
    // takes the plane's.
    std::lock_guard<std::mutex> guard{releases_->mtx};
    releases_->plane = nullptr;
  }
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
  // Idle segments are a cache for this plane's next snapshot.
  drain_segment_pool();
}

} // namespace dice::net
