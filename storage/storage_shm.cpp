// The shared-memory store: segments in /dev/shm, recycled through a
// bounded pool of this process's removed segments.
#include "storage_impl.hpp"
#include <signal.h>

namespace dice::storage_detail {

namespace {

// Shared-memory segments this process removed, kept under a private name
// for its next store: writing into pages tmpfs already holds is a plain copy,
// while a fresh segment costs page allocation, page-cache insertion and, on
// removal, freeing (10x the copy). A removed segment is renamed first, so an
// old reference never finds it (`storage_missing`, as before); a reader that
// opened it before its removal and is still reading when it is reused gets
// a checksum mismatch, never torn bytes. Bounded by `shm_pool_cap`; what is
// left is unlinked at exit.
constexpr std::size_t shm_pool_cap = std::size_t{512} << 20;
constexpr std::size_t shm_pool_max = 8;
// Stored segments whose writable view this process keeps until they are
// removed (then pooled with it); the oldest lose their view beyond this.
constexpr std::size_t shm_live_max = 8;

// A segment this process wrote, with the descriptor and (once reused) a
// writable view that move with it from store to pool and back.
struct shm_seg {
  std::string name;
  std::size_t size = 0;
  unique_fd fd;
  std::uint8_t* view = nullptr;
  std::size_t view_len = 0;
  shm_seg() = default;
  shm_seg(const shm_seg&) = delete;
  shm_seg& operator=(const shm_seg&) = delete;
  ~shm_seg() {
    if (view != nullptr)
      ::munmap(view, view_len);
    // `fd` closes after this body, i.e. after the view is gone.
  }
};

using seg_ptr = std::unique_ptr<shm_seg>;

struct shm_pool {
  std::mutex mtx;
  bool closed = false;
  std::vector<seg_ptr> free; // oldest first
  std::vector<seg_ptr> live; // stored, not yet removed; oldest first
  std::size_t bytes = 0;     // of `free`
  std::uint64_t counter = 0;
};

shm_pool& the_shm_pool() {
  // Leaked on purpose: storage may be removed during static destruction.
  static auto* pool = [] {
    auto* p = new shm_pool;
    std::atexit([] {
      auto& q = the_shm_pool();
      std::lock_guard<std::mutex> guard{q.mtx};
      for (auto& seg : q.free)
        ::shm_unlink(seg->name.c_str());
      q.free.clear();
      q.closed = true;
    });
    return p;
  }();
  return *pool;
}

// POSIX shared memory lives in /dev/shm on Linux; renaming there is atomic.
std::string shm_path(const std::string& name) {
  return "/dev/shm" + name;
}

// Takes a pooled segment (the closest in size) and renames it to `name`:
// a stored item's name says which node stored it, and a free segment's that
// it is pooled. (Reusing it under its pool name would save the rename, ~4 us
// on tmpfs, 6 % of a 1 MB store+load, but leave items that no name ties to
// their node.)
seg_ptr reuse_shm(const std::string& name, std::size_t total) {
  auto& pool = the_shm_pool();
  seg_ptr seg;
  {
    std::lock_guard<std::mutex> guard{pool.mtx};
    auto best = pool.free.end();
    auto dist = [&](std::size_t n) {
      return n >= total ? n - total : total - n;
    };
    for (auto i = pool.free.begin(); i != pool.free.end(); ++i)
      if (best == pool.free.end() || dist((*i)->size) < dist((*best)->size))
        best = i;
    if (best == pool.free.end())
      return nullptr;
    seg = std::move(*best);
    pool.bytes -= seg->size;
    pool.free.erase(best);
  }
  if (::rename(shm_path(seg->name).c_str(), shm_path(name).c_str()) != 0) {
    ::shm_unlink(seg->name.c_str());
    return nullptr;
  }
  seg->name = name;
  return seg;
}

// Writes `parts` into a reused segment through its writable view: a plain
// memcpy into pages tmpfs already holds, mapped once (pwrite would look up
// and lock every 4 KiB page, 3-4x the copy), hashed in the same pass
// (copy_hash).
caf::error write_view(shm_seg& seg, const std::vector<byte_span>& parts,
                      std::size_t total, std::uint64_t& checksum) {
  if (seg.size != total) {
    if (::ftruncate(seg.fd.get(), static_cast<off_t>(total)) != 0)
      return make_error(errc::storage_failed, sys_error("ftruncate"));
    seg.size = total;
  }
  if (seg.view != nullptr && seg.view_len != total) {
    ::munmap(seg.view, seg.view_len);
    seg.view = nullptr;
  }
  if (seg.view == nullptr) {
    auto p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, seg.fd.get(), 0);
    if (p == MAP_FAILED)
      return make_error(errc::storage_failed, sys_error("mmap " + seg.name));
    seg.view = static_cast<std::uint8_t*>(p);
    seg.view_len = total;
  }
  std::uint64_t h = 0;
  std::size_t pos = 0;
  for (auto& [p, n] : parts) {
    // Each part seeds the next one's hash (checksum_of's chain). A SIGBUS
    // here means someone truncated the segment under the view.
    if (!copy_hash_guarded(seg.view + pos, p, n, h, h))
      return make_error(errc::storage_failed,
                        seg.name + " was truncated while written");
    pos += n;
  }
  checksum = h;
  return caf::none;
}

// Keeps `seg` (with its view) until its item is removed.
void keep_live(seg_ptr seg) {
  auto& pool = the_shm_pool();
  seg_ptr evicted;
  std::lock_guard<std::mutex> guard{pool.mtx};
  if (pool.live.size() >= shm_live_max) {
    evicted = std::move(pool.live.front());
    pool.live.erase(pool.live.begin());
  }
  pool.live.push_back(std::move(seg));
}

} // namespace

// Keeps a segment this process created instead of unlinking it; false if
// it was not ours or the pool is full (the caller unlinks).
bool recycle_shm(const storage_ref& ref) {
  auto& pool = the_shm_pool();
  std::lock_guard<std::mutex> guard{pool.mtx};
  seg_ptr seg;
  for (auto i = pool.live.begin(); i != pool.live.end(); ++i)
    if ((*i)->name == ref.path) {
      seg = std::move(*i);
      pool.live.erase(i);
      break;
    }
  // Only plain names ("/dice...", no further '/') that this process made.
  if (pool.closed || ref.path.find(own_tag()) == std::string::npos
      || ref.path.find('/', 1) != std::string::npos || ref.size > shm_pool_cap)
    return false;
  if (!seg) {
    seg = std::make_unique<shm_seg>();
    seg->name = ref.path;
    seg->size = ref.size;
    seg->fd.reset(::shm_open(ref.path.c_str(),
                             O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0));
    struct stat st;
    if (!seg->fd || ::fstat(seg->fd.get(), &st) != 0 || !S_ISREG(st.st_mode)
        || static_cast<std::uint64_t>(st.st_size) != ref.size)
      return false;
  }
  while (!pool.free.empty()
         && (pool.bytes + ref.size > shm_pool_cap
             || pool.free.size() >= shm_pool_max)) {
    ::shm_unlink(pool.free.front()->name.c_str());
    pool.bytes -= pool.free.front()->size;
    pool.free.erase(pool.free.begin());
  }
  auto name = "/dice.pool" + own_tag() + std::to_string(++pool.counter);
  if (::rename(shm_path(ref.path).c_str(), shm_path(name).c_str()) != 0)
    return false;
  seg->name = name;
  pool.bytes += seg->size;
  pool.free.push_back(std::move(seg));
  return true;
}

caf::expected<storage_ref> store_shm(const storage_options& opts,
                                     const std::vector<byte_span>& parts,
                                     std::size_t total) {
  auto name = "/" + unique_name(opts, "");
  std::uint64_t checksum = 0;
  auto seg = reuse_shm(name, total);
  // A segment that must grow is written with write() once: faulting its
  // new pages in through the view costs more.
  if (seg && total >= map_min && total <= seg->size) {
    if (auto err = write_view(*seg, parts, total, checksum)) {
      ::shm_unlink(name.c_str());
      return err;
    }
    keep_live(std::move(seg));
  } else {
    // write() for a fresh, small or growing segment: tmpfs takes pages
    // whole without zeroing them and nothing is mapped (mmap, page faults
    // and munmap cost 10x the copy for a fresh segment).
    auto fd = seg
      ? std::move(seg->fd)
      : unique_fd{
        ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)};
    seg.reset();
    if (!fd)
      return make_error(errc::storage_failed, sys_error("shm_open " + name));
    caf::error err;
    if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0
        || ::lseek(fd.get(), 0, SEEK_SET) != 0)
      err = make_error(errc::storage_failed, sys_error("ftruncate " + name));
    else
      err = write_parts(fd.get(), parts, checksum);
    fd.reset();
    if (err) {
      ::shm_unlink(name.c_str());
      return err;
    }
  }
  storage_ref ref;
  ref.kind = storage_kind::shm;
  ref.path = name;
  ref.host = this_host();
  ref.size = total;
  ref.origin = opts.node;
  ref.checksum = checksum;
  return ref;
}

} // namespace dice::storage_detail

namespace dice {

std::size_t sweep_dead_segments(const std::string& dir,
                                std::chrono::seconds min_age) {
  std::size_t removed = 0;
  auto now = ::time(nullptr);
  std::error_code ec;
  auto me = ::getpid();
  auto uid = ::geteuid();
  auto is_digit = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  };
  for (auto& e : std::filesystem::directory_iterator{dir, ec}) {
    auto name = e.path().filename().string();
    // dice.NODE.PID.TAG.N or dice.pool.PID.TAG.N (own_tag(): ".PID.TAG.").
    if (name.rfind("dice.", 0) != 0)
      continue;
    auto a = name.find('.', 5);
    auto b = a == std::string::npos ? a : name.find('.', a + 1);
    if (b == std::string::npos || b == a + 1 || b - a - 1 > 9)
      continue;
    auto digits = name.substr(a + 1, b - a - 1);
    if (!std::all_of(digits.begin(), digits.end(), is_digit))
      continue;
    auto pid = static_cast<pid_t>(std::stol(digits));
    struct stat st {};
    if (pid <= 0 || pid == me || ::lstat(e.path().c_str(), &st) != 0
        || !S_ISREG(st.st_mode) || st.st_uid != uid
        || now - st.st_mtime < static_cast<time_t>(min_age.count()))
      continue;
    // ESRCH: no such process. EPERM: alive, another user's (a reused PID).
    if (::kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    if (::unlink(e.path().c_str()) == 0)
      ++removed;
  }
  return removed;
}

} // namespace dice
