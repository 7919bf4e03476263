#include "data_shm.hpp"

#include "dice/core/errc.hpp"
#include "dice/net/data_plane.hpp"
#include "dice/security/auth.hpp"
#include "dice/storage/fd_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace dice::net {

namespace {

constexpr std::size_t header_bytes = 4096;
constexpr char magic[8] = {'D', 'I', 'C', 'E', 'S', 'H', 'M', '2'};
// Snapshot segments are rewritten in place when recycled, so they are
// sealed against resizing only (a reader's pread then never comes up
// short); the tag protocol (data_shm.hpp) replaces F_SEAL_WRITE.
constexpr int segment_seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW;
// The probe is never rewritten.
constexpr int probe_seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
  | F_SEAL_WRITE;
constexpr off_t tag_offset = 8;

std::atomic<std::uint64_t> segments{0};
std::atomic<std::uint64_t> reused{0};
std::mutex segments_mtx;
std::condition_variable segments_closed;

// Idle segments, newest last (guarded by segments_mtx).
std::deque<std::unique_ptr<shm_segment>> pool;

std::uint64_t random_u64() {
  auto r = random_nonce(8);
  std::uint64_t x = 0;
  std::memcpy(&x, r.data(), 8);
  return x;
}

// A new tag: never 0 (a rewrite in progress) and never the previous one.
std::uint64_t next_tag(std::uint64_t old) {
  for (;;)
    if (auto x = random_u64(); x != 0 && x != old)
      return x;
}

int open_peer_fd(pid_t pid, int fd) {
  auto path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

// The last holder gone: back to the pool if the segment may be rewritten,
// else closed.
void recycle(shm_segment* seg) {
  std::unique_ptr<shm_segment> owned{seg};
  std::unique_ptr<shm_segment> evicted;
  {
    std::lock_guard<std::mutex> guard{segments_mtx};
    if (--segments == 0)
      segments_closed.notify_all();
    if (!owned->reusable.load())
      return; // closed by `owned`, outside the pool
    if (pool.size() >= max_pooled_segments) {
      evicted = std::move(pool.front());
      pool.pop_front();
    }
    pool.push_back(std::move(owned));
  }
}

// An idle segment of `n` bytes, or null.
std::unique_ptr<shm_segment> take_pooled(std::size_t n) {
  std::lock_guard<std::mutex> guard{segments_mtx};
  for (auto i = pool.rbegin(); i != pool.rend(); ++i)
    if ((*i)->size == n) {
      auto seg = std::move(*i);
      pool.erase(std::next(i).base());
      return seg;
    }
  return nullptr;
}

std::unique_ptr<shm_segment> new_segment(std::size_t n) {
  auto fd = ::memfd_create("dice-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return nullptr;
  auto seg = std::make_unique<shm_segment>();
  seg->fd = fd;
  seg->size = n;
  char header[24] = {};
  std::memcpy(header, magic, 8);
  std::memcpy(header + 16, &seg->size, 8);
  if (::ftruncate(fd, static_cast<off_t>(header_bytes + n)) != 0
      || !pwrite_all(fd, header, sizeof(header), 0)
      || ::fcntl(fd, F_ADD_SEALS, segment_seals) != 0)
    return nullptr;
  return seg;
}

} // namespace

shm_segment::~shm_segment() {
  if (fd >= 0)
    ::close(fd);
}

std::shared_ptr<shm_segment> make_segment(const std::uint8_t* data,
                                          std::size_t n) {
  auto seg = take_pooled(n);
  bool was_pooled = seg != nullptr;
  if (!seg)
    seg = new_segment(n);
  if (!seg)
    return nullptr;
  // Tag 0 first: a reader still copying the previous bytes (a lost peer;
  // live peers released them) sees the change after its copy and drops it.
  const std::uint64_t in_progress = 0;
  auto tag = next_tag(seg->tag);
  if (!pwrite_all(seg->fd, &in_progress, 8, tag_offset))
    return nullptr;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!pwrite_all(seg->fd, data, n, header_bytes))
    return nullptr;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!pwrite_all(seg->fd, &tag, 8, tag_offset))
    return nullptr;
  seg->tag = tag;
  if (was_pooled)
    ++reused;
  ++segments;
  return std::shared_ptr<shm_segment>{seg.release(), recycle};
}

caf::expected<writable_bytes> read_segment(pid_t pid, int fd, std::uint64_t tag,
                                           std::uint64_t size) {
  auto in = open_peer_fd(pid, fd);
  if (in < 0)
    return make_error(errc::storage_missing,
                      std::string{"cannot open the peer's segment: "}
                        + std::strerror(errno));
  auto fail = [&](const char* why) -> caf::expected<writable_bytes> {
    ::close(in);
    return make_error(errc::malformed_input, why);
  };
  struct stat st;
  char header[24];
  std::uint64_t got_tag = 0;
  std::uint64_t got_size = 0;
  // Sealed against resizing: the size checked here holds for the copy.
  if ((::fcntl(in, F_GET_SEALS) & segment_seals) != segment_seals)
    return fail("the peer's segment is not sealed");
  if (::fstat(in, &st) != 0
      || static_cast<std::uint64_t>(st.st_size) != header_bytes + size
      || !pread_all(in, header, sizeof(header), 0)
      || std::memcmp(header, magic, 8) != 0)
    return fail("the peer's segment has a wrong size or header");
  std::memcpy(&got_tag, header + 8, 8);
  std::memcpy(&got_size, header + 16, 8);
  if (tag == 0 || got_tag != tag || got_size != size)
    return fail("the peer's segment is another one");
  // A copy, not a mapping: the sender rewrites its segments once every
  // peer released them, and on this host (4 KiB tmpfs pages) a copy costs
  // about what a mapping's page faults and unmap cost; see docs/storage.md
  // for the paired figures of both.
  writable_bytes buf;
  try {
    buf = writable_bytes{static_cast<std::size_t>(size)};
  } catch (const std::bad_alloc&) {
    return fail("cannot allocate the destination");
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!pread_all(in, buf.data(), static_cast<std::size_t>(size), header_bytes))
    return fail("cannot read the peer's segment");
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Unchanged tag: no rewrite began before the copy ended (a rewrite zeroes
  // the tag before it touches a byte).
  if (!pread_all(in, &got_tag, 8, tag_offset) || got_tag != tag)
    return fail("the peer rewrote its segment during the copy");
  ::close(in);
  return buf;
}

void drop_held(std::map<std::uint64_t, std::shared_ptr<shm_segment>>& held) {
  for (auto& [id, seg] : held)
    seg->reusable = false;
  held.clear();
}

void drain_segment_pool() {
  std::deque<std::unique_ptr<shm_segment>> idle;
  std::lock_guard<std::mutex> guard{segments_mtx};
  idle.swap(pool);
}

shm_probe::~shm_probe() {
  if (fd >= 0)
    ::close(fd);
}

std::unique_ptr<shm_probe> make_probe() {
  auto fd = ::memfd_create("dice-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return nullptr;
  auto p = std::make_unique<shm_probe>();
  p->fd = fd;
  p->token = random_nonce(16);
  if (!pwrite_all(fd, p->token.data(), p->token.size(), 0)
      || ::fcntl(fd, F_ADD_SEALS, probe_seals) != 0)
    return nullptr;
  return p;
}

bool check_probe(pid_t pid, int fd, const std::string& token) {
  auto in = open_peer_fd(pid, fd);
  if (in < 0)
    return false;
  std::string got(token.size(), '\0');
  auto ok = pread_all(in, got.data(), got.size(), 0)
    && ::fcntl(in, F_GET_SEALS) == probe_seals && same_mac(got, token);
  ::close(in);
  return ok;
}

std::uint64_t open_segments() noexcept {
  return segments.load();
}

std::uint64_t reused_segments() noexcept {
  return reused.load();
}

std::uint64_t pooled_segments() noexcept {
  std::lock_guard<std::mutex> guard{segments_mtx};
  return pool.size();
}

bool wait_segments_closed(caf::timespan timeout) {
  std::unique_lock<std::mutex> guard{segments_mtx};
  return segments_closed.wait_for(guard, timeout, [] {
    return segments.load() == 0;
  });
}

} // namespace dice::net
