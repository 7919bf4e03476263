#include "data_shm.hpp"

#include "dice/core/errc.hpp"
#include "dice/security/auth.hpp"
#include "net/data_plane.hpp"
#include "storage/fd_io.hpp"

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
// Snapshot segments are rewritten in place when recycled (only after every
// peer released them), so they carry detail::shareable_seals() (resizing
// only), as the shareable blocks a snapshot is built in; the tag protocol
// (data_shm.hpp) and the release replace F_SEAL_WRITE.
const int segment_seals = dice::detail::shareable_seals();
static_assert(header_bytes == dice::detail::shareable_header,
              "a shareable block is a segment: same header");
// The probe is never rewritten.
constexpr int probe_seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
  | F_SEAL_WRITE;
constexpr off_t tag_offset = 8;

std::atomic<std::uint64_t> segments{0};
std::atomic<std::uint64_t> reused{0};
std::atomic<std::uint64_t> borrowed{0};
std::mutex segments_mtx;
std::condition_variable segments_closed;

// Idle segments, newest last (guarded by segments_mtx). Never destroyed: a
// segment may come back from a plane that outlives static destruction; the
// kernel closes what is left at exit.
std::deque<std::unique_ptr<shm_segment>>& pool = *new std::deque<
  std::unique_ptr<shm_segment>>;

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

// The tag word of a segment's header, read and written atomically through
// views in different processes (GCC builtins: std::atomic_ref is C++20).
void store_tag(std::uint8_t* base, std::uint64_t tag) {
  __atomic_store_n(reinterpret_cast<std::uint64_t*>(base + tag_offset), tag,
                   __ATOMIC_SEQ_CST);
}

std::uint64_t load_tag(const std::uint8_t* base) {
  return __atomic_load_n(
    reinterpret_cast<const std::uint64_t*>(base + tag_offset),
    __ATOMIC_SEQ_CST);
}

unique_fd open_peer_fd(pid_t pid, int fd) {
  auto path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  return unique_fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
}

// The last holder gone: back to the pool if the segment may be rewritten,
// else closed.
void recycle(shm_segment* seg) {
  std::unique_ptr<shm_segment> owned{seg};
  std::unique_ptr<shm_segment> evicted;
  auto block = owned->owner.block();
  if (block != nullptr && !owned->reusable.load())
    block->retired = true; // closed with its last handle, never rewritten
  {
    std::lock_guard<std::mutex> guard{segments_mtx};
    if (--segments == 0)
      segments_closed.notify_all();
    if (block != nullptr)
      return; // the block's handle goes with `owned`
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
  unique_fd fd{
    ::memfd_create("dice-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  if (!fd)
    return nullptr;
  auto seg = std::make_unique<shm_segment>();
  seg->fd = std::move(fd);
  seg->size = n;
  char header[24] = {};
  std::memcpy(header, magic, 8);
  std::memcpy(header + 16, &seg->size, 8);
  auto raw = seg->fd.get();
  if (::ftruncate(raw, static_cast<off_t>(header_bytes + n)) != 0
      || !pwrite_all(raw, header, sizeof(header), 0)
      || ::fcntl(raw, F_ADD_SEALS, segment_seals) != 0)
    return nullptr;
  return seg;
}

} // namespace

shm_segment::~shm_segment() {
  if (view != nullptr)
    ::munmap(view, header_bytes + size);
  // `fd` closes after this body, i.e. after the view is gone.
}

std::shared_ptr<shm_segment> make_segment(const std::uint8_t* data,
                                          std::size_t n) {
  auto tag = std::uint64_t{0};
  if (auto seg = take_pooled(n)) {
    // Recycled: copied in through the segment's own mapping, populated
    // once (pwrite would look up and lock every 4 KiB page, about 4x the
    // memcpy here).
    if (seg->view == nullptr) {
      auto addr = ::mmap(nullptr, header_bytes + n, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_POPULATE, seg->fd.get(), 0);
      if (addr == MAP_FAILED)
        return nullptr;
      seg->view = static_cast<std::uint8_t*>(addr);
    }
    // Tag 0 first: a reader still copying the previous bytes (a lost peer;
    // live peers released them) sees the change after its copy and drops
    // it. The fences also order memcpy's non-temporal stores.
    tag = next_tag(seg->tag);
    store_tag(seg->view, 0);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (n > 0)
      std::memcpy(seg->view + header_bytes, data, n);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    store_tag(seg->view, tag);
    seg->tag = tag;
    ++reused;
    ++segments;
    return std::shared_ptr<shm_segment>{seg.release(), recycle};
  }
  auto seg = new_segment(n);
  if (!seg)
    return nullptr;
  // A fresh segment: write() allocates its pages whole, without the page
  // faults a first write through a mapping would take.
  tag = next_tag(0);
  if (!pwrite_all(seg->fd.get(), data, n, header_bytes)
      || !pwrite_all(seg->fd.get(), &tag, 8, tag_offset))
    return nullptr;
  seg->tag = tag;
  ++segments;
  return std::shared_ptr<shm_segment>{seg.release(), recycle};
}

std::shared_ptr<shm_segment> share_block(const shared_bytes& bytes) {
  auto b = bytes.block();
  if (b == nullptr)
    return nullptr;
  std::unique_ptr<shm_segment> seg;
  try {
    seg = std::make_unique<shm_segment>();
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  seg->owner = bytes;
  seg->size = bytes.size();
  {
    // Its bytes are final (frozen): the header and then, after a fence,
    // the tag, once for every peer and item that shares this content (a
    // tag per item would fail a reference to it still on its way).
    std::lock_guard<std::mutex> guard{b->mtx};
    if (b->tag == 0) {
      std::memcpy(b->base, magic, 8);
      std::memcpy(b->base + 16, &seg->size, 8);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      b->tag = next_tag(b->last_tag);
      b->last_tag = b->tag;
      store_tag(b->base, b->tag);
    }
    seg->tag = b->tag;
  }
  ++segments;
  ++borrowed;
  return std::shared_ptr<shm_segment>{seg.release(), recycle};
}

shm_mapping::~shm_mapping() {
  if (addr != nullptr)
    ::munmap(const_cast<std::uint8_t*>(addr), len);
}

std::shared_ptr<const shm_mapping> shm_views::known(int fd, std::uint64_t tag,
                                                    std::size_t len) const {
  for (auto& v : views_)
    if (v.fd == fd && v.map->len == len && load_tag(v.map->addr) == tag)
      return v.map;
  return nullptr;
}

caf::expected<std::shared_ptr<const shm_mapping>>
shm_views::find(pid_t pid, int fd, std::uint64_t size) {
  // Closed on every return: a view keeps the memfd alive by itself.
  auto in = open_peer_fd(pid, fd);
  if (!in)
    return make_error(errc::storage_missing,
                      std::string{"cannot open the peer's segment: "}
                        + std::strerror(errno));
  auto fail =
    [](const char* why) -> caf::expected<std::shared_ptr<const shm_mapping>> {
    return make_error(errc::malformed_input, why);
  };
  struct stat st;
  if (::fstat(in.get(), &st) != 0)
    return fail("cannot stat the peer's segment");
  auto len = header_bytes + static_cast<std::size_t>(size);
  for (auto& v : views_)
    if (v.dev == st.st_dev && v.ino == st.st_ino && v.map->len == len) {
      v.fd = fd;
      return v.map; // the same file as before: its view is still right
    }
  // Sealed against resizing: the view never reaches past the end of the
  // file (no SIGBUS), whatever the peer does later.
  if ((::fcntl(in.get(), F_GET_SEALS) & segment_seals) != segment_seals)
    return fail("the peer's segment is not sealed");
  // At least the header and the bytes: a block built for a snapshot may
  // hold a few bytes of room after it (writable_bytes::shareable).
  if (static_cast<std::uint64_t>(st.st_size) < len)
    return fail("the peer's segment has a wrong size or header");
  auto addr = ::mmap(nullptr, len, PROT_READ, MAP_SHARED | MAP_POPULATE,
                     in.get(), 0);
  if (addr == MAP_FAILED)
    return fail("cannot map the peer's segment");
  in.reset(); // the view keeps the memfd alive
  auto map = std::make_shared<shm_mapping>();
  map->addr = static_cast<const std::uint8_t*>(addr);
  map->len = len;
  // Bytes handed out of a dropped view keep its mapping.
  if (views_.size() > max_pooled_segments)
    views_.erase(views_.begin());
  views_.push_back(view{st.st_dev, st.st_ino, map, fd});
  return views_.back().map;
}

namespace {

// What the bytes handed out of a mapping hold: the mapping, and the
// release the sender waits for before it rewrites the segment.
struct shared_view {
  shared_view(std::shared_ptr<const shm_mapping> m, std::function<void()> r)
    : map(std::move(m)), released(std::move(r)) {
    // nop
  }
  shared_view(const shared_view&) = delete;
  shared_view& operator=(const shared_view&) = delete;
  ~shared_view() {
    released();
  }
  std::shared_ptr<const shm_mapping> map;
  std::function<void()> released;
};

} // namespace

caf::expected<shared_bytes> shm_views::share(pid_t pid, int fd,
                                             std::uint64_t tag,
                                             std::uint64_t size,
                                             std::function<void()> released) {
  // A segment the sender recycles comes back under its fd number with a
  // new tag: a view of it that already holds this tag is that very
  // segment, checked when it was mapped (sealed, its size), so the
  // reference needs no open, fstat and seal check through /proc. A tag
  // seen nowhere (a new segment, or an fd number reused for another file)
  // takes the full path.
  auto len = header_bytes + static_cast<std::size_t>(size);
  auto map = tag == 0 ? nullptr : known(fd, tag, len);
  if (map == nullptr) {
    auto found = find(pid, fd, size);
    if (!found)
      return std::move(found.error());
    map = std::move(*found);
  }
  auto p = map->addr;
  std::uint64_t got_size = 0;
  std::memcpy(&got_size, p + 16, 8);
  if (std::memcmp(p, magic, 8) != 0 || got_size != size)
    return make_error(errc::malformed_input,
                      "the peer's segment has a wrong size or header");
  // The sender writes the tag last (after a fence), so this tag means the
  // bytes under it are whole; it rewrites them only after the release.
  if (tag == 0 || load_tag(p) != tag)
    return make_error(errc::malformed_input,
                      "the peer's segment is another one");
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::shared_ptr<const shared_view> holder;
  try {
    holder = std::make_shared<const shared_view>(std::move(map),
                                                 std::move(released));
  } catch (const std::bad_alloc&) {
    return make_error(errc::malformed_input, "cannot allocate the handle");
  }
  return shared_bytes{std::shared_ptr<const std::uint8_t>{holder,
                                                          p + header_bytes},
                      static_cast<std::size_t>(size)};
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

std::unique_ptr<shm_probe> make_probe() {
  unique_fd fd{::memfd_create("dice-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  if (!fd)
    return nullptr;
  auto p = std::make_unique<shm_probe>();
  p->fd = std::move(fd);
  p->token = random_nonce(16);
  if (!pwrite_all(p->fd.get(), p->token.data(), p->token.size(), 0)
      || ::fcntl(p->fd.get(), F_ADD_SEALS, probe_seals) != 0)
    return nullptr;
  return p;
}

bool check_probe(pid_t pid, int fd, const std::string& token) {
  auto in = open_peer_fd(pid, fd);
  if (!in)
    return false;
  std::string got(token.size(), '\0');
  return pread_all(in.get(), got.data(), got.size(), 0)
    && ::fcntl(in.get(), F_GET_SEALS) == probe_seals && same_mac(got, token);
}

std::uint64_t open_segments() noexcept {
  return segments.load();
}

std::uint64_t reused_segments() noexcept {
  return reused.load();
}

std::uint64_t borrowed_segments() noexcept {
  return borrowed.load();
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
