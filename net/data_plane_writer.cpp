// The data plane's writer thread: one per outgoing link.
#include "data_plane_impl.hpp"

namespace dice::net {

using namespace plane_detail;

namespace {

// Header, bytes, trailer. Bytes that came with their checksum (a built
// snapshot's) are not hashed here at all: a 1 MB round's writer spent
// about 23 us on it before the first byte left. Others have each piece
// hashed just before it is written (in cache for the kernel's copy), once
// for all writers of the item.
bool write_transfer(int fd, ssl_st* ssl, std::uint64_t id, std::uint32_t tag,
                    std::uint64_t order, const data_item& item) {
  auto& bytes = item.bytes();
  auto hdr = encode_header(data_header{id, bytes.size(), tag});
  // The snapshot's header frame leaves with the transfer header (untagged
  // transfers only: a relay round's reference names its own).
  auto& meta = item.meta();
  auto with_meta = tag == 0 && !meta.empty();
  auto meta_hdr = encode_meta_frame(data_meta_frame{
    static_cast<std::uint32_t>(meta.size()), order, item.meta_checksum()});
  std::array<char, data_trailer_size> trailer{};
  std::size_t off = 0;
  do {
    auto len = std::min(write_piece, bytes.size() - off);
    item.hash_upto(off + len);
    iovec iov[5];
    int k = 0;
    if (off == 0) {
      if (with_meta) {
        iov[k++] = iovec{meta_hdr.data(), meta_hdr.size()};
        iov[k++] = iovec{const_cast<char*>(meta.data()), meta.size()};
      }
      iov[k++] = iovec{hdr.data(), hdr.size()};
    }
    if (len > 0)
      iov[k++] = iovec{const_cast<std::uint8_t*>(bytes.data()) + off, len};
    if (off + len == bytes.size()) {
      // The last piece is hashed: the trailer leaves with it.
      trailer = encode_trailer(item.checksum());
      iov[k++] = iovec{trailer.data(), trailer.size()};
    }
    if (!write_all(fd, ssl, iov, k))
      return false;
    off += len;
  } while (off < bytes.size());
  return true;
}

} // namespace

void data_plane::run_writer(std::shared_ptr<out_link> link, unique_fd fd) {
  std::string why = "closed";
  auto send_frame = [&](const std::array<char, data_header_size>& f) {
    iovec iov{const_cast<char*>(f.data()), f.size()};
    return write_all(link->fd, link->ssl.get(), &iov, 1);
  };
  // Same host? The peer answers "probe ok" on its own connection if it can
  // read this token through /proc.
  if (probe_ && same_host_
      && !send_frame(encode_probe(data_probe{
        static_cast<std::uint32_t>(::getpid()),
        static_cast<std::uint32_t>(probe_->fd.get()), probe_->token})))
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
    if (link->same_host && job.tag == 0) {
      if (auto seg = job.item->segment()) {
        auto frame = encode_ref(
          data_ref{static_cast<std::uint32_t>(seg->fd_number()), job.id,
                   seg->size, seg->tag});
        {
          std::lock_guard<std::mutex> guard{link->mtx};
          if (link->dead)
            break;
          link->held.emplace(job.id, std::move(seg));
        }
        // From here the segment lives in `held` (and in items other peers
        // still queue): the release closes it, and the counters are right
        // before the peer can answer.
        auto meta = job.item->meta(); // a copy: the item goes now
        auto meta_hdr = encode_meta_frame(
          data_meta_frame{static_cast<std::uint32_t>(meta.size()), job.order,
                          job.item->meta_checksum()});
        job.item.reset();
        iovec iov[3];
        int k = 0;
        if (!meta.empty()) {
          iov[k++] = iovec{meta_hdr.data(), meta_hdr.size()};
          iov[k++] = iovec{const_cast<char*>(meta.data()), meta.size()};
        }
        iov[k++] = iovec{frame.data(), frame.size()};
        ++counters().shm_sent;
        ++counters().transfers_sent;
        if (!write_all(link->fd, link->ssl.get(), iov, k)) {
          why = std::string{"write failed: "} + std::strerror(errno);
          break;
        }
        continue;
      }
    }
    // Counted before the write: a receiver's answer to these bytes can then
    // never overtake the count (benchmarks read it at the answer).
    counters().bytes_sent += bytes.size();
    ++counters().transfers_sent;
    if (!write_transfer(link->fd, link->ssl.get(), job.id, job.tag, job.order,
                        *job.item)) {
      counters().bytes_sent -= bytes.size();
      --counters().transfers_sent;
      why = std::string{"write failed: "} + std::strerror(errno);
      break;
    }
  }
  {
    std::lock_guard<std::mutex> guard{link->mtx};
    link->dead = true;
    link->queue.clear();
    drop_held(link->held); // the peer may still read them
  }
  ::shutdown(fd.get(), SHUT_RDWR);
  fd.reset();
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

} // namespace dice::net
