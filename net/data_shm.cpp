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
#include <mutex>

namespace dice::net {

namespace {

constexpr std::size_t header_bytes = 4096;
constexpr char magic[8] = {'D', 'I', 'C', 'E', 'S', 'H', 'M', '1'};
constexpr int seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

std::atomic<std::uint64_t> segments{0};
std::atomic<std::uint64_t> mappings{0};
std::mutex segments_mtx;
std::condition_variable segments_closed;

// A peer's segment mapped read-only; unmapped with the last handle of the
// bytes it holds.
struct segment_mapping {
  void* addr;
  std::size_t len;

  segment_mapping(void* a, std::size_t n) : addr(a), len(n) {
    ++mappings;
  }

  segment_mapping(const segment_mapping&) = delete;
  segment_mapping& operator=(const segment_mapping&) = delete;

  ~segment_mapping() {
    ::munmap(addr, len);
    std::lock_guard<std::mutex> guard{segments_mtx};
    if (--mappings == 0)
      segments_closed.notify_all();
  }
};

std::uint64_t random_u64() {
  auto r = random_nonce(8);
  std::uint64_t x = 0;
  std::memcpy(&x, r.data(), 8);
  return x;
}

int open_peer_fd(pid_t pid, int fd) {
  auto path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

} // namespace

shm_segment::~shm_segment() {
  if (fd >= 0) {
    ::close(fd);
    std::lock_guard<std::mutex> guard{segments_mtx};
    if (--segments == 0)
      segments_closed.notify_all();
  }
}

std::shared_ptr<shm_segment> make_segment(const std::uint8_t* data,
                                          std::size_t n) {
  auto fd = ::memfd_create("dice-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return nullptr;
  ++segments;
  auto seg = std::make_shared<shm_segment>();
  seg->fd = fd;
  seg->tag = random_u64();
  seg->size = n;
  char header[24];
  std::memcpy(header, magic, 8);
  std::memcpy(header + 8, &seg->tag, 8);
  std::memcpy(header + 16, &seg->size, 8);
  if (::ftruncate(fd, static_cast<off_t>(header_bytes + n)) != 0
      || !pwrite_all(fd, header, sizeof(header), 0)
      || !pwrite_all(fd, data, n, header_bytes)
      || ::fcntl(fd, F_ADD_SEALS, seals) != 0)
    return nullptr;
  return seg;
}

caf::expected<shared_bytes> read_segment(pid_t pid, int fd, std::uint64_t tag,
                                         std::uint64_t size) {
  auto in = open_peer_fd(pid, fd);
  if (in < 0)
    return make_error(errc::storage_missing,
                      std::string{"cannot open the peer's segment: "}
                        + std::strerror(errno));
  auto fail = [&](const char* why) -> caf::expected<shared_bytes> {
    ::close(in);
    return make_error(errc::malformed_input, why);
  };
  struct stat st;
  char header[24];
  std::uint64_t got_tag = 0;
  std::uint64_t got_size = 0;
  // Sealed: the sender can no longer change, shrink or grow it, so the
  // mapping below never changes under its readers and never faults past
  // the end of the file (SIGBUS).
  if ((::fcntl(in, F_GET_SEALS) & seals) != seals)
    return fail("the peer's segment is not sealed");
  if (::fstat(in, &st) != 0
      || static_cast<std::uint64_t>(st.st_size) != header_bytes + size
      || !pread_all(in, header, sizeof(header), 0)
      || std::memcmp(header, magic, 8) != 0)
    return fail("the peer's segment has a wrong size or header");
  std::memcpy(&got_tag, header + 8, 8);
  std::memcpy(&got_size, header + 16, 8);
  if (got_tag != tag || got_size != size)
    return fail("the peer's segment is another one");
  if (size == 0) {
    ::close(in);
    return shared_bytes{};
  }
  // A shared read-only view of the sender's pages: no copy, and no
  // MAP_POPULATE (the pages are faulted in, 16 at a time by fault-around,
  // by whoever reads them). An earlier private mapping with MAP_POPULATE
  // was slower than a copy; see docs/storage.md for the figures of both.
  auto len = static_cast<std::size_t>(size);
  auto addr = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, in,
                     static_cast<off_t>(header_bytes));
  if (addr == MAP_FAILED)
    return fail("cannot map the peer's segment");
  ::close(in); // the mapping keeps the memfd alive
  std::shared_ptr<const void> owner;
  try {
    owner = std::make_shared<const segment_mapping>(addr, len);
  } catch (const std::bad_alloc&) {
    ::munmap(addr, len);
    return make_error(errc::malformed_input, "cannot track the mapping");
  }
  return shared_bytes{owner, static_cast<const std::uint8_t*>(addr), len};
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
      || ::fcntl(fd, F_ADD_SEALS, seals) != 0)
    return nullptr;
  return p;
}

bool check_probe(pid_t pid, int fd, const std::string& token) {
  auto in = open_peer_fd(pid, fd);
  if (in < 0)
    return false;
  std::string got(token.size(), '\0');
  auto ok = pread_all(in, got.data(), got.size(), 0)
    && ::fcntl(in, F_GET_SEALS) == seals && same_mac(got, token);
  ::close(in);
  return ok;
}

std::uint64_t open_segments() noexcept {
  return segments.load();
}

std::uint64_t mapped_segments() noexcept {
  return mappings.load();
}

bool wait_segments_unmapped(caf::timespan timeout) {
  std::unique_lock<std::mutex> guard{segments_mtx};
  return segments_closed.wait_for(guard, timeout, [] {
    return mappings.load() == 0;
  });
}

bool wait_segments_closed(caf::timespan timeout) {
  std::unique_lock<std::mutex> guard{segments_mtx};
  return segments_closed.wait_for(guard, timeout, [] {
    return segments.load() == 0;
  });
}

} // namespace dice::net
