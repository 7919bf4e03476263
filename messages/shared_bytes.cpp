#include "dice/messages/shared_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <new>
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

struct pool {
  std::mutex mtx;
  std::vector<std::pair<void*, std::size_t>> free;
  std::size_t bytes = 0;

  void* take(std::size_t len) {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto i = free.begin(); i != free.end(); ++i)
      if (i->second == len) {
        auto base = i->first;
        bytes -= len;
        free.erase(i);
        return base;
      }
    return nullptr;
  }

  void give(void* base, std::size_t len) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (len <= pool_cap) {
        // Make room by dropping the oldest buffers (other sizes).
        while ((bytes + len > pool_cap || free.size() >= pool_max)
               && !free.empty()) {
          ::munmap(free.front().first, free.front().second);
          bytes -= free.front().second;
          free.erase(free.begin());
        }
        free.emplace_back(base, len);
        bytes += len;
        return;
      }
    }
    ::munmap(base, len);
  }
};

pool& the_pool() {
  // Never destroyed before the last buffer: leaked on purpose at exit.
  static auto* instance = new pool;
  return *instance;
}

struct recycle {
  void* base;
  std::size_t len;
  void operator()(std::uint8_t*) const noexcept {
    the_pool().give(base, len);
  }
};

// A page-aligned mapping of its own, recycled (no huge pages: it is
// smaller than one).
std::shared_ptr<std::uint8_t> allocate_mapped(std::size_t n) {
  auto len = (n + small_page - 1) / small_page * small_page;
  if (auto base = the_pool().take(len))
    return {static_cast<std::uint8_t*>(base), recycle{base, len}};
  auto base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw std::bad_alloc{};
  return {static_cast<std::uint8_t*>(base), recycle{base, len}};
}

std::shared_ptr<std::uint8_t> allocate_huge(std::size_t n) {
  auto len = (n + huge_page - 1) / huge_page * huge_page;
  if (auto base = the_pool().take(len))
    return {static_cast<std::uint8_t*>(base), recycle{base, len}};
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
constexpr int shareable_seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW;

void close_block(detail::shareable_block* b) noexcept {
  ::munmap(b->base, detail::shareable_header + b->size);
  ::close(b->fd);
  delete b;
}

struct block_pool {
  std::mutex mtx;
  std::vector<detail::shareable_block*> free; // oldest first
  std::size_t bytes = 0;

  detail::shareable_block* take(std::size_t n) {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto i = free.rbegin(); i != free.rend(); ++i)
      if ((*i)->size == n) {
        auto b = *i;
        free.erase(std::next(i).base());
        bytes -= n;
        return b;
      }
    return nullptr;
  }

  void give(detail::shareable_block* b) {
    std::vector<detail::shareable_block*> evicted;
    {
      std::lock_guard<std::mutex> guard{mtx};
      while ((bytes + b->size > pool_cap || free.size() >= shareable_pool_max)
             && !free.empty()) {
        evicted.push_back(free.front());
        bytes -= free.front()->size;
        free.erase(free.begin());
      }
      if (b->size <= pool_cap) {
        free.push_back(b);
        bytes += b->size;
        b = nullptr;
      }
    }
    for (auto x : evicted)
      close_block(x);
    if (b != nullptr)
      close_block(b);
  }
};

block_pool& the_blocks() {
  // Leaked on purpose, as the_pool().
  static auto* instance = new block_pool;
  return *instance;
}

detail::shareable_block* new_block(std::size_t n) {
  int fd = ::memfd_create("dice-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return nullptr;
  auto len = detail::shareable_header + n;
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(len)) == 0
      && ::fcntl(fd, F_ADD_SEALS, shareable_seals) == 0)
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

void detail::shareable_release::operator()(std::uint8_t*) const noexcept {
  if (block->retired.load())
    close_block(block);
  else
    the_blocks().give(block);
}

writable_bytes writable_bytes::shareable(std::size_t n) {
  if (n < shareable_min || n >= shareable_max)
    return writable_bytes{n};
  auto b = the_blocks().take(n);
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
