#include "dice/messages/shared_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

namespace dice {

namespace {

// From this size on, buffers get their own 2 MiB-aligned mapping with
// transparent huge pages (madvise mode is the common default): a fresh
// 100 MB buffer then costs 48 page faults instead of 24,400.
constexpr std::size_t huge_page = std::size_t{2} << 20;

// From this size on (below huge_page), buffers get their own mapping in
// whole 4 KiB pages and are recycled like the huge ones: a model of 1 MB
// received or loaded every round otherwise cost a fresh heap block whose
// pages the kernel faulted in and zeroed each time (9 % of a 1 MB
// shared-memory store+load, snapshot_bench).
constexpr std::size_t mapped_min = std::size_t{256} << 10;
constexpr std::size_t small_page = 4096;

// Most idle buffers kept (of any size), beside pool_cap's bytes.
constexpr std::size_t pool_max = 64;

// Freed huge buffers kept for the next allocation of the same size: a
// snapshot of one model has the same size every time, and reusing its pages
// skips the kernel's page faults and zeroing (a fresh 100 MB buffer costs
// ~10 ms of zeroing; a reused one nothing). Bounded, so an idle process
// keeps at most `pool_cap` bytes.
constexpr std::size_t pool_cap = std::size_t{512} << 20;

// Idle buffers kept for the next request of the same size (a model's
// snapshot has the same size every round), newest first, the oldest
// evicted beyond `max_items` or pool_cap bytes. One for the mappings, one
// for the shareable memfd blocks: `Traits` says how big an item is and how
// it is freed.
template <class Traits>
class size_pool {
 public:
  using item = typename Traits::item;

  explicit size_pool(std::size_t max_items) : max_items_(max_items) {
    // nop
  }

  /// An idle item of exactly `n` bytes, or none.
  std::optional<item> take(std::size_t n) {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto i = free_.rbegin(); i != free_.rend(); ++i)
      if (Traits::size(*i) == n) {
        auto x = *i;
        free_.erase(std::next(i).base());
        bytes_ -= n;
        return x;
      }
    return std::nullopt;
  }

  /// Keeps `x` for later, or frees it if it alone exceeds the cap.
  void give(item x) {
    std::vector<item> evicted;
    bool keep = Traits::size(x) <= pool_cap;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      while (keep && !free_.empty()
             && (bytes_ + Traits::size(x) > pool_cap
                 || free_.size() >= max_items_)) {
        evicted.push_back(free_.front());
        bytes_ -= Traits::size(free_.front());
        free_.erase(free_.begin());
      }
      if (keep) {
        free_.push_back(x);
        bytes_ += Traits::size(x);
      }
    }
    // Freed outside the lock: munmap and close take their time.
    for (auto& y : evicted)
      Traits::release(y);
    if (!keep)
      Traits::release(x);
  }

 private:
  std::mutex mtx_;
  std::vector<item> free_; // oldest first
  std::size_t bytes_ = 0;
  std::size_t max_items_;
};

struct mapping {
  void* base;
  std::size_t len;
};

struct mapping_traits {
  using item = mapping;
  static std::size_t size(const mapping& x) noexcept {
    return x.len;
  }
  static void release(const mapping& x) noexcept {
    ::munmap(x.base, x.len);
  }
};

size_pool<mapping_traits>& the_pool() {
  // Never destroyed before the last buffer: leaked on purpose at exit.
  static auto* instance = new size_pool<mapping_traits>{pool_max};
  return *instance;
}

struct recycle {
  void* base;
  std::size_t len;
  void operator()(std::uint8_t*) const noexcept {
    the_pool().give(mapping{base, len});
  }
};

// A page-aligned mapping of its own, recycled (no huge pages: it is
// smaller than one).
std::shared_ptr<std::uint8_t> allocate_mapped(std::size_t n) {
  auto len = (n + small_page - 1) / small_page * small_page;
  if (auto x = the_pool().take(len))
    return {static_cast<std::uint8_t*>(x->base), recycle{x->base, len}};
  auto base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw std::bad_alloc{};
  return {static_cast<std::uint8_t*>(base), recycle{base, len}};
}

std::shared_ptr<std::uint8_t> allocate_huge(std::size_t n) {
  auto len = (n + huge_page - 1) / huge_page * huge_page;
  if (auto x = the_pool().take(len))
    return {static_cast<std::uint8_t*>(x->base), recycle{x->base, len}};
  auto span = len + huge_page;
  auto raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw std::bad_alloc{};
  // Trim to a 2 MiB boundary so every page of it can be a huge page.
  auto addr = reinterpret_cast<std::uintptr_t>(raw);
  auto aligned = (addr + huge_page - 1) / huge_page * huge_page;
  if (auto head = aligned - addr; head > 0)
    ::munmap(raw, head);
  if (auto tail = span - (aligned - addr) - len; tail > 0)
    ::munmap(reinterpret_cast<void*>(aligned + len), tail);
  auto base = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(base, len, MADV_HUGEPAGE); // a hint: without THP, normal pages
#endif
  return {static_cast<std::uint8_t*>(base), recycle{base, len}};
}

struct aligned_delete {
  void operator()(std::uint8_t* p) const noexcept {
    ::operator delete (p, std::align_val_t{64});
  }
};

// Shareable blocks (writable_bytes::shareable): memfds, so that a
// same-host peer maps the pages a snapshot was built in and the sender
// copies nothing into a segment (that copy was 0.03-0.09 ms of a 1 MB
// round). Recycled by exact size like the mappings above: a model's
// snapshot has the same size every round. Sealed against resizing as
// net/data_shm.cpp requires of every segment it maps. Below huge_page
// only: memfds get no transparent huge pages here (shmem_enabled is
// "never"), and in 4 KiB pages a 6.8 MB or 100 MB snapshot went 5-10 %
// slower to a peer over the data plane (hashing and sendmsg walk every
// page); from 2 MiB the same-host path copies into a segment instead.
constexpr std::size_t shareable_min = mapped_min;
constexpr std::size_t shareable_max = huge_page;
constexpr std::size_t shareable_pool_max = 8;

void close_block(detail::shareable_block* b) noexcept {
  ::munmap(b->base, detail::shareable_header + b->size);
  ::close(b->fd);
  delete b;
}

struct block_traits {
  using item = detail::shareable_block*;
  static std::size_t size(const item& b) noexcept {
    return b->size;
  }
  static void release(const item& b) noexcept {
    close_block(b);
  }
};

size_pool<block_traits>& the_blocks() {
  // Leaked on purpose, as the_pool().
  static auto* instance = new size_pool<block_traits>{shareable_pool_max};
  return *instance;
}

detail::shareable_block* new_block(std::size_t n) {
  int fd = ::memfd_create("dice-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return nullptr;
  auto len = detail::shareable_header + n;
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(len)) == 0
      && ::fcntl(fd, F_ADD_SEALS, detail::shareable_seals()) == 0)
    base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  // Plain new (not nothrow): close_block's delete must match it, also in
  // programs that replace the global operators.
  detail::shareable_block* b = nullptr;
  try {
    b = new detail::shareable_block;
  } catch (const std::bad_alloc&) {
    ::munmap(base, len);
    ::close(fd);
    return nullptr;
  }
  b->fd = fd;
  b->base = static_cast<std::uint8_t*>(base);
  b->size = n;
  return b;
}

} // namespace

int detail::shareable_seals() noexcept {
  return F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW;
}

void detail::shareable_release::operator()(std::uint8_t*) const noexcept {
  if (block->retired.load())
    close_block(block);
  else
    the_blocks().give(block);
}

writable_bytes writable_bytes::shareable(std::size_t n) {
  if (n < shareable_min || n >= shareable_max)
    return writable_bytes{n};
  auto taken = the_blocks().take(n);
  auto b = taken ? *taken : nullptr;
  if (b != nullptr) {
    // New bytes: a reader still holding a view of the old ones finds no
    // magic and no tag (net/data_shm.cpp checks both before it shares).
    std::lock_guard<std::mutex> guard{b->mtx};
    std::memset(b->base, 0, 64);
    b->tag = 0;
  } else if (b = new_block(n); b == nullptr) {
    return writable_bytes{n};
  }
  writable_bytes result;
  result.ptr_ = std::shared_ptr<std::uint8_t>{
    b->base + detail::shareable_header, detail::shareable_release{b}};
  result.size_ = n;
  return result;
}

writable_bytes::writable_bytes(std::size_t n) : size_(n) {
  if (n == 0)
    return;
  if (n >= huge_page) {
    ptr_ = allocate_huge(n);
    return;
  }
  if (n >= mapped_min) {
    ptr_ = allocate_mapped(n);
    return;
  }
  auto p = static_cast<std::uint8_t*>(::operator new (n, std::align_val_t{64}));
  ptr_ = std::shared_ptr<std::uint8_t>{p, aligned_delete{}};
}

} // namespace dice
