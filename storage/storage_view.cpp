// Copies through shared mappings of shared-memory segments: a SIGBUS guard
// (a segment truncated under a mapping raises SIGBUS on the next access)
// and the reader's cache of read-only views.
#include "storage/copy_hash.hpp"

#include "storage_impl.hpp"

#include <csetjmp>
#include <csignal>
#include <memory>

namespace dice::storage_detail {

namespace {

// Bytes copied per step: the hash reads them while they are still in L1.
constexpr std::size_t copy_block = 32 * 1024;

// The jump target of the copy this thread is in (null outside one). Plain
// thread_local in a static library: initial-exec TLS, safe in a handler.
thread_local sigjmp_buf* bus_jump = nullptr;
struct sigaction previous_bus;

// A SIGBUS inside a guarded copy ends that copy; any other goes where it
// went before (by default: the process dies, as it did without the guard).
void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  if (auto* env = bus_jump) {
    bus_jump = nullptr;
    siglongjmp(*env, 1);
  }
  if ((previous_bus.sa_flags & SA_SIGINFO) != 0
      && previous_bus.sa_sigaction != nullptr) {
    previous_bus.sa_sigaction(sig, info, ctx);
    return;
  }
  if (previous_bus.sa_handler != SIG_DFL
      && previous_bus.sa_handler != SIG_IGN) {
    previous_bus.sa_handler(sig);
    return;
  }
  // Returning re-runs the faulting access under the default action.
  ::signal(SIGBUS, SIG_DFL);
}

void install_bus_guard() {
  static const bool installed = [] {
    struct sigaction sa = {};
    sa.sa_sigaction = on_sigbus;
    // No SIGBUS mask in the handler, so a plain siglongjmp (no mask
    // restore, no system call per copy) leaves the thread as it was.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(SIGBUS, &sa, &previous_bus) == 0;
  }();
  (void)installed;
}

// Runs `copy` with SIGBUS from a truncated mapping turned into false.
template <class Copy>
bool guarded(Copy copy) {
  install_bus_guard();
  sigjmp_buf env;
  if (sigsetjmp(env, 0) != 0) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return false;
  }
  bus_jump = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  copy();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  bus_jump = nullptr;
  return true;
}

// One read-only view of a segment, unmapped when its last user is done.
struct view {
  dev_t dev = 0;
  ino_t ino = 0;
  std::size_t size = 0;
  unique_fd fd; // to notice the segment was removed (st_nlink == 0)
  const std::uint8_t* addr = nullptr;
  ~view() {
    if (addr != nullptr)
      ::munmap(const_cast<std::uint8_t*>(addr), size);
    // `fd` closes after this body.
  }
};

// Views of the segments this process read lately. A segment a writer
// recycles keeps its inode, so the next load of it copies through the same
// view: no mapping, no page faults, no unmapping per load. A view keeps its
// segment's pages alive, so views of removed segments are dropped at the
// next lookup, and at most `max_views` (`max_view_bytes` in all) are kept.
constexpr std::size_t max_views = 4;
constexpr std::size_t max_view_bytes = std::size_t{512} << 20;

struct view_cache {
  std::mutex mtx;
  std::vector<std::shared_ptr<const view>> views; // oldest first
};

view_cache& the_views() {
  static auto* cache = new view_cache; // used until exit, never destroyed
  return *cache;
}

// A view the segment was truncated under: dropped, so a later load maps
// what is there.
caf::error drop_truncated(const storage_ref& ref, const item_view& view) {
  auto& cache = the_views();
  std::lock_guard<std::mutex> guard{cache.mtx};
  auto& vs = cache.views;
  vs.erase(std::remove_if(vs.begin(), vs.end(),
                          [&](const auto& v) {
                            return v == view.handle;
                          }),
           vs.end());
  return bad(ref, "truncated while reading");
}

} // namespace

bool copy_guarded(std::uint8_t* dst, const std::uint8_t* src, std::size_t n,
                  checksum64_stream* sum) {
  return guarded([&] {
    for (std::size_t i = 0; i < n; i += copy_block) {
      auto k = std::min(copy_block, n - i);
      std::memcpy(dst + i, src + i, k);
      if (sum != nullptr)
        sum->update(dst + i, k);
    }
  });
}

bool copy_hash_guarded(std::uint8_t* dst, const std::uint8_t* src,
                       std::size_t n, std::uint64_t seed,
                       std::uint64_t& digest) {
  return guarded([&] {
    digest = copy_hash(dst, src, n, seed);
  });
}

item_view map_view(int fd, const struct stat& st) {
  auto size = static_cast<std::size_t>(st.st_size);
  if (size < map_min)
    return {};
  auto& cache = the_views();
  std::unique_lock<std::mutex> guard{cache.mtx};
  std::shared_ptr<const view> found;
  auto& vs = cache.views;
  for (auto i = vs.begin(); i != vs.end();) {
    struct stat vst;
    if (::fstat((*i)->fd.get(), &vst) != 0 || vst.st_nlink == 0) {
      i = vs.erase(i); // removed: let its pages go
      continue;
    }
    if ((*i)->dev == st.st_dev && (*i)->ino == st.st_ino && (*i)->size == size)
      found = *i;
    ++i;
  }
  if (!found) {
    guard.unlock();
    auto p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
      return {}; // read with pread instead
    auto v = std::make_shared<view>();
    v->dev = st.st_dev;
    v->ino = st.st_ino;
    v->size = size;
    v->addr = static_cast<const std::uint8_t*>(p);
    v->fd.reset(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!v->fd)
      return {};
    guard.lock();
    std::size_t bytes = size;
    for (auto& x : vs)
      bytes += x->size;
    while (!vs.empty() && (vs.size() >= max_views || bytes > max_view_bytes)) {
      bytes -= vs.front()->size;
      vs.erase(vs.begin());
    }
    if (size <= max_view_bytes)
      vs.push_back(v);
    found = std::move(v);
  }
  return {found, found->addr};
}

caf::error read_part(const storage_ref& ref, int fd, const item_view& view,
                     std::size_t pos, std::uint8_t* out, std::size_t n,
                     checksum64_stream* sum) {
  if (view.addr == nullptr)
    return read_at(ref, fd, pos, out, n, sum);
  if (copy_guarded(out, view.addr + pos, n, sum))
    return caf::none;
  return drop_truncated(ref, view);
}

caf::error read_part_hashed(const storage_ref& ref, int fd,
                            const item_view& view, std::size_t pos,
                            std::uint8_t* out, std::size_t n,
                            std::uint64_t seed, std::uint64_t& digest) {
  if (view.addr == nullptr) {
    checksum64_stream sum{seed};
    auto err = read_at(ref, fd, pos, out, n, &sum);
    digest = sum.digest();
    return err;
  }
  if (copy_hash_guarded(out, view.addr + pos, n, seed, digest))
    return caf::none;
  return drop_truncated(ref, view);
}

} // namespace dice::storage_detail
