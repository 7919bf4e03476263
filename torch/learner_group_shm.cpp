// shm_link: the outboxes, their offer and mapping, and one message each way
// (see learner_group_shm.hpp for why and how).

#include "learner_group_shm.hpp"

#include "dice/security/auth.hpp"

#include "learner_group_io.hpp"
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#endif

namespace dice::detail {

using link_io::io_all;
using link_io::remaining_ms;

namespace {

using clock = std::chrono::steady_clock;

constexpr char offer_magic[8] = {'d', 'i', 'c', 'e', '-', 'l', 'g', 's'};

// An outbox: the token (16 B) at 0, the reader's "I sleep" word at 64 (its
// own cache line), then two slots, each a header line (step + 1, bytes) and
// the message.
constexpr std::size_t waiter_at = 64;
constexpr std::size_t slots_at = 128;
constexpr std::size_t slot_header = 64;
constexpr std::size_t slot_size = slot_header + shm_link::capacity;
constexpr std::size_t outbox_size = slots_at + 2 * slot_size;
constexpr int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
constexpr char doorbell = static_cast<char>(0xDB);

std::atomic<std::uint64_t> messages{0};

std::uint8_t* slot(std::uint8_t* box, std::uint64_t step) {
  return box + slots_at + (step & 1) * slot_size;
}

// The words both processes touch, through GCC's builtins (std::atomic_ref
// is C++20): seq_cst, so that a reader that announces its sleep and then
// finds no message, and a writer that publishes and then finds no sleeper,
// cannot both happen.
std::uint64_t* word64(std::uint8_t* p) {
  return reinterpret_cast<std::uint64_t*>(p);
}
std::uint32_t* word32(std::uint8_t* p) {
  return reinterpret_cast<std::uint32_t*>(p);
}

std::uint8_t* map(int fd) {
  auto p = ::mmap(nullptr, outbox_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                  0);
  return p == MAP_FAILED ? nullptr : static_cast<std::uint8_t*>(p);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

} // namespace

std::vector<std::unique_ptr<shm_link>> share_memory(const std::vector<int>& fds,
                                                    bool wanted,
                                                    clock::time_point deadline,
                                                    bool& failed) {
  failed = false;
  std::vector<std::unique_ptr<shm_link>> links(fds.size());
  // Every rank sends first, then reads: the few bytes fit any socket
  // buffer, so no pair waits on the other.
  for (std::size_t p = 0; p < fds.size(); ++p) {
    if (fds[p] < 0)
      continue;
    if (wanted)
      links[p] = shm_link::make();
    auto offer = links[p] ? links[p]->offer() : shm_offer{};
    if (!io_all(fds[p], &offer, sizeof(offer), true, deadline)) {
      failed = true;
      return {};
    }
  }
  std::vector<char> mapped(fds.size(), 0);
  for (std::size_t p = 0; p < fds.size(); ++p) {
    if (fds[p] < 0)
      continue;
    shm_offer theirs;
    if (!io_all(fds[p], &theirs, sizeof(theirs), false, deadline)) {
      failed = true;
      return {};
    }
    mapped[p] = links[p] && links[p]->attach(theirs) ? 1 : 0;
    if (!io_all(fds[p], &mapped[p], 1, true, deadline)) {
      failed = true;
      return {};
    }
  }
  // Shared memory for a pair only if both could map the other's outbox:
  // then both ranks decide alike for every message.
  for (std::size_t p = 0; p < fds.size(); ++p) {
    if (fds[p] < 0)
      continue;
    char theirs = 0;
    if (!io_all(fds[p], &theirs, 1, false, deadline)) {
      failed = true;
      return {};
    }
    if (mapped[p] == 0 || theirs != 1)
      links[p].reset();
  }
  return links;
}

std::uint64_t shm_messages() noexcept {
  return messages.load();
}

std::unique_ptr<shm_link> shm_link::make() {
  std::unique_ptr<shm_link> x{new shm_link};
  x->fd_ = ::memfd_create("dice-lg-outbox", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (x->fd_ < 0 || ::ftruncate(x->fd_, static_cast<off_t>(outbox_size)) != 0
      || ::fcntl(x->fd_, F_ADD_SEALS, seals) != 0)
    return nullptr;
  x->mine_ = map(x->fd_);
  if (x->mine_ == nullptr)
    return nullptr;
  auto token = random_nonce(sizeof(x->offer_.token));
  std::memcpy(x->mine_, token.data(), token.size());
  std::memcpy(x->offer_.magic, offer_magic, sizeof(offer_magic));
  x->offer_.pid = static_cast<std::uint32_t>(::getpid());
  x->offer_.fd = static_cast<std::uint32_t>(x->fd_);
  x->offer_.capacity = capacity;
  std::memcpy(x->offer_.token, token.data(), token.size());
  return x;
}

shm_link::~shm_link() {
  if (mine_ != nullptr)
    ::munmap(mine_, outbox_size);
  if (theirs_ != nullptr)
    ::munmap(theirs_, outbox_size);
  if (fd_ >= 0)
    ::close(fd_);
}

bool shm_link::attach(const shm_offer& theirs) {
  if (std::memcmp(theirs.magic, offer_magic, sizeof(offer_magic)) != 0
      || theirs.capacity != capacity)
    return false;
  // Opens only on this host, in this pid namespace, for this user (or
  // root): exactly the peers that could read our memory anyway.
  auto path = "/proc/" + std::to_string(theirs.pid) + "/fd/"
    + std::to_string(theirs.fd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return false;
  struct stat st {};
  // Sealed against shrinking: the peer cannot cut the pages from under
  // this mapping (a SIGBUS here) once it is checked.
  auto ok = ::fstat(fd, &st) == 0
    && static_cast<std::size_t>(st.st_size) == outbox_size
    && (::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK) != 0;
  auto p = ok ? map(fd) : nullptr;
  ::close(fd);
  if (p == nullptr)
    return false;
  // The token says this is the segment the peer offered (not another
  // process's that reused the pid).
  if (!same_mac(std::string(reinterpret_cast<char*>(p), sizeof(theirs.token)),
                std::string(theirs.token, sizeof(theirs.token)))) {
    ::munmap(p, outbox_size);
    return false;
  }
  theirs_ = p;
  return true;
}

bool shm_link::write(std::uint64_t step, const std::vector<iovec>& out,
                     std::size_t bytes, int fd) {
  auto s = slot(mine_, step);
  auto dst = s + slot_header;
  for (auto& v : out) {
    std::memcpy(dst, v.iov_base, v.iov_len);
    dst += v.iov_len;
  }
  __atomic_store_n(word64(s + 8), bytes, __ATOMIC_RELAXED);
  ++messages; // before it is published: a reader may count at once
  __atomic_store_n(word64(s), step + 1, __ATOMIC_SEQ_CST);
  // The reader said it sleeps: one byte wakes it (and it reads exactly
  // that byte, as it set the word exactly once).
  if (__atomic_exchange_n(word32(mine_ + waiter_at), 0, __ATOMIC_SEQ_CST) == 1)
    return ::send(fd, &doorbell, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1;
  return true;
}

caf::error shm_link::read(std::uint64_t step, char* dst, std::size_t bytes,
                          int fd, std::chrono::microseconds spin,
                          std::chrono::milliseconds timeout,
                          const std::atomic<bool>& shut,
                          const std::string& who) {
  auto s = slot(theirs_, step);
  auto ready = [&] {
    return __atomic_load_n(word64(s), __ATOMIC_SEQ_CST) == step + 1;
  };
  auto start = clock::now();
  auto deadline = start + timeout;
  auto broken = [&](const char* what) {
    return make_error(errc::unreachable, who + " " + what);
  };
  // The doorbell that the writer sends once it took our "I sleep".
  auto ring = [&]() -> caf::error {
    for (;;) {
      char c = 0;
      auto k = ::recv(fd, &c, 1, MSG_DONTWAIT);
      if (k == 1)
        return c == doorbell
          ? caf::none
          : make_error(errc::model_mismatch,
                       who
                         + " sent over the socket a message this rank "
                           "expected in shared memory");
      if (k == 0 || (errno != EAGAIN && errno != EINTR))
        return broken("closed the link");
      if (shut)
        return broken("was shut down");
      pollfd p{fd, POLLIN, 0};
      auto rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc == 0 && clock::now() >= deadline)
        return make_error(errc::timeout,
                          who + ": no progress in "
                            + std::to_string(timeout.count()) + " ms");
    }
  };
  while (!ready()) {
    if (shut)
      return broken("was shut down");
    if (clock::now() - start < spin) {
      cpu_relax();
      continue;
    }
    auto waiter = word32(theirs_ + waiter_at);
    __atomic_store_n(waiter, 1, __ATOMIC_SEQ_CST);
    if (ready()) {
      // Published meanwhile: if the writer also took our word, its
      // doorbell is on the way and must be read now.
      if (__atomic_exchange_n(waiter, 0, __ATOMIC_SEQ_CST) == 0)
        if (auto err = ring())
          return err;
      break;
    }
    if (auto err = ring())
      return err;
  }
  auto got = __atomic_load_n(word64(s + 8), __ATOMIC_RELAXED);
  if (got != bytes)
    return make_error(errc::model_mismatch,
                      who + " sent step " + std::to_string(step) + " of "
                        + std::to_string(got) + " bytes, expected "
                        + std::to_string(bytes));
  std::memcpy(dst, s + slot_header, bytes);
  return caf::none;
}

} // namespace dice::detail
