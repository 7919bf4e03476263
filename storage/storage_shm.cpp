// The shared-memory store: segments in /dev/shm, recycled through a
// bounded pool of this process's removed segments.
#include "storage_impl.hpp"

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

struct shm_pool {
  std::mutex mtx;
  bool closed = false;
  std::vector<std::pair<std::string, std::size_t>> free; // name, size
  std::size_t bytes = 0;
  std::uint64_t counter = 0;
};

shm_pool& the_shm_pool() {
  // Leaked on purpose: storage may be removed during static destruction.
  static auto* pool = [] {
    auto* p = new shm_pool;
    std::atexit([] {
      auto& q = the_shm_pool();
      std::lock_guard<std::mutex> guard{q.mtx};
      for (auto& entry : q.free)
        ::shm_unlink(entry.first.c_str());
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

// Takes a pooled segment (the closest in size) and renames it to `name`.
bool reuse_shm(const std::string& name, std::size_t total) {
  auto& pool = the_shm_pool();
  std::string old;
  {
    std::lock_guard<std::mutex> guard{pool.mtx};
    auto best = pool.free.end();
    auto dist = [&](std::size_t n) {
      return n >= total ? n - total : total - n;
    };
    for (auto i = pool.free.begin(); i != pool.free.end(); ++i)
      if (best == pool.free.end() || dist(i->second) < dist(best->second))
        best = i;
    if (best == pool.free.end())
      return false;
    old = best->first;
    pool.bytes -= best->second;
    pool.free.erase(best);
  }
  if (::rename(shm_path(old).c_str(), shm_path(name).c_str()) == 0)
    return true;
  ::shm_unlink(old.c_str());
  return false;
}

} // namespace

// Keeps a segment this process created instead of unlinking it; false if
// it was not ours or the pool is full (the caller unlinks).
bool recycle_shm(const storage_ref& ref) {
  auto& pool = the_shm_pool();
  std::lock_guard<std::mutex> guard{pool.mtx};
  // Only plain names ("/dice...", no further '/') that this process made.
  if (pool.closed || ref.path.find(own_tag()) == std::string::npos
      || ref.path.find('/', 1) != std::string::npos || ref.size > shm_pool_cap)
    return false;
  while (!pool.free.empty()
         && (pool.bytes + ref.size > shm_pool_cap
             || pool.free.size() >= shm_pool_max)) {
    ::shm_unlink(pool.free.front().first.c_str());
    pool.bytes -= pool.free.front().second;
    pool.free.erase(pool.free.begin());
  }
  auto name = "/dice.pool" + own_tag() + std::to_string(++pool.counter);
  if (::rename(shm_path(ref.path).c_str(), shm_path(name).c_str()) != 0)
    return false;
  pool.free.emplace_back(name, static_cast<std::size_t>(ref.size));
  pool.bytes += ref.size;
  return true;
}

caf::expected<storage_ref> store_shm(const storage_options& opts,
                                     const std::vector<byte_span>& parts,
                                     std::size_t total) {
  auto name = "/" + unique_name(opts, "");
  int fd = reuse_shm(name, total)
    ? ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600)
    : ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(errc::storage_failed, sys_error("shm_open " + name));
  auto fail = [&](const std::string& what) {
    auto err = make_error(errc::storage_failed, sys_error(what));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return err;
  };
  // write() instead of mmap + memcpy: tmpfs takes whole pages without
  // zeroing them first and this process maps nothing (mmap, page faults
  // and munmap cost 10x the copy for a fresh segment).
  std::uint64_t checksum = 0;
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0)
    return fail("ftruncate " + name);
  if (auto err = write_parts(fd, parts, checksum)) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return err;
  }
  ::close(fd);
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
