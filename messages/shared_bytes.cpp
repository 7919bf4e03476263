#include "dice/messages/shared_bytes.hpp"

#include <sys/mman.h>

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

} // namespace

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
