#include "dice/storage/storage.hpp"

#include "dice/core/errc.hpp"
#include "dice/storage/fd_io.hpp"
#include "dice/messages/snapshot_chunk.hpp"
#include "dice/security/trust.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

namespace dice {

namespace {

constexpr char snapshot_magic[8] = {'D', 'I', 'C', 'E', 'S', 'N', 'P', '1'};
constexpr char context_magic[8] = {'D', 'I', 'C', 'E', 'C', 'T', 'X', '1'};

std::string sys_error(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// A unique name per save: node, process, a counter and a random tag (two
// runs of one node id never collide).
// ".PID.TAG." of this process: part of every name it creates.
const std::string& own_tag() {
  static const std::string result = [] {
    std::random_device rd;
    auto tag = (std::uint64_t{rd()} << 32) ^ rd();
    char buf[64];
    std::snprintf(buf, sizeof(buf), ".%ld.%016llx.",
                  static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(tag));
    return std::string{buf};
  }();
  return result;
}

std::string unique_name(const storage_options& opts, const char* suffix) {
  static std::atomic<std::uint64_t> counter{0};
  char buf[96];
  std::snprintf(buf, sizeof(buf), "dice.%u%s%llu%s", opts.node,
                own_tag().c_str(), static_cast<unsigned long long>(++counter),
                suffix);
  return buf;
}

// Bytes written or read per system call on the storage paths: hashed just
// before (or after) the copy, so the checksum reads them from cache.
constexpr std::size_t io_block = 256 * 1024;

// Writes the parts back to back and returns their chained checksum (the same
// as checksum_of), hashing each block just before the kernel copies it.
caf::error write_parts(int fd, const std::vector<byte_span>& parts,
                       std::uint64_t& checksum) {
  std::uint64_t h = 0;
  for (auto& [p, n] : parts) {
    checksum64_stream sum{h};
    for (std::size_t i = 0; i < n; i += io_block) {
      auto k = std::min(io_block, n - i);
      sum.update(p + i, k);
      if (!write_all(fd, p + i, k))
        return make_error(errc::storage_failed, sys_error("write"));
    }
    h = sum.digest();
  }
  checksum = h;
  return caf::none;
}

std::uint64_t checksum_of(const std::vector<byte_span>& parts) {
  // Chained: each part's checksum seeds the next.
  std::uint64_t h = 0;
  for (auto& [p, n] : parts)
    h = checksum64(p, n, h);
  return h;
}

caf::expected<storage_ref> store_file(const storage_options& opts,
                                      const std::vector<byte_span>& parts,
                                      std::size_t total) {
  std::error_code ec;
  std::filesystem::create_directories(opts.dirname, ec);
  if (ec)
    return make_error(errc::storage_failed,
                      "cannot create " + opts.dirname + ": " + ec.message());
  auto name = unique_name(opts, ".bin");
  auto path = (std::filesystem::path{opts.dirname} / name).string();
  auto tmp = path + ".part";
  int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(errc::storage_failed, sys_error("cannot create " + tmp));
  std::uint64_t checksum = 0;
  if (auto err = write_parts(fd, parts, checksum)) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return err;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = make_error(errc::storage_failed, sys_error("rename " + tmp));
    ::unlink(tmp.c_str());
    return err;
  }
  storage_ref ref;
  ref.kind = storage_kind::file;
  ref.path = path;
  ref.host = this_host();
  ref.size = total;
  ref.origin = opts.node;
  ref.checksum = checksum;
  return ref;
}

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

void put_u64(std::vector<char>& buf, std::uint64_t x) {
  char tmp[8];
  std::memcpy(tmp, &x, 8);
  buf.insert(buf.end(), tmp, tmp + 8);
}

std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

// The checksum store_bytes computed: chained over the parts the encoder
// wrote (the decoders know where the parts begin).
caf::error verify(const storage_ref& ref, const std::vector<byte_span>& parts) {
  if (ref.checksum != 0 && checksum_of(parts) != ref.checksum)
    return make_error(errc::malformed_input,
                      ref.path + ": checksum mismatch (changed or corrupt)");
  return caf::none;
}

caf::error bad(const storage_ref& ref, const std::string& why) {
  return make_error(errc::malformed_input, ref.path + ": " + why);
}

// Parses magic + meta length; returns the meta bytes' position.
caf::error check_header(const storage_ref& ref, const std::uint8_t* data,
                        std::size_t size, const char* magic,
                        std::uint64_t& meta_len) {
  if (size < 16 || std::memcmp(data, magic, 8) != 0)
    return bad(ref,
               std::string{"not a dice "}
                 + (magic == snapshot_magic ? "snapshot" : "context")
                 + " file");
  meta_len = get_u64(data + 8);
  if (meta_len > size - 16)
    return bad(ref, "truncated header");
  return caf::none;
}

} // namespace

const std::string& this_host() {
  static const std::string name = [] {
    char buf[256] = {0};
    if (::gethostname(buf, sizeof(buf) - 1) != 0)
      return std::string{"localhost"};
    return std::string{buf};
  }();
  return name;
}

caf::expected<storage_ref> store_bytes(const storage_options& opts,
                                       const std::vector<byte_span>& parts) {
  std::size_t total = 0;
  for (auto& part : parts)
    total += part.second;
  // Both compute the checksum while writing.
  return opts.kind == storage_kind::shm ? store_shm(opts, parts, total)
                                        : store_file(opts, parts, total);
}

namespace {

// Opens what `ref` points at, checks host, kind and size; fd < 0 afterwards
// only with an error. Never follows a symlink (O_NOFOLLOW) and never blocks
// (O_NONBLOCK: opening a FIFO for reading would wait for a writer for ever);
// only a regular file is read.
caf::error open_storage(const storage_ref& ref, int& fd, std::size_t& size) {
  fd = -1;
  constexpr int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (ref.kind == storage_kind::shm) {
    if (ref.host != this_host())
      return make_error(errc::storage_failed,
                        "shared memory " + ref.path + " lives on host "
                          + ref.host + ", this is " + this_host());
    fd = ::shm_open(ref.path.c_str(), flags, 0);
  } else {
    fd = ::open(ref.path.c_str(), flags);
  }
  if (fd < 0) {
    if (errno == ENOENT)
      return make_error(errc::storage_missing, ref.path + " does not exist");
    if (errno == ELOOP)
      return make_error(errc::storage_failed,
                        ref.path + " is a symbolic link: refused");
    return make_error(errc::storage_failed, sys_error("open " + ref.path));
  }
  auto fail = [&](caf::error err) {
    ::close(fd);
    fd = -1;
    return err;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fail(
      make_error(errc::storage_failed, sys_error("stat " + ref.path)));
  if (!S_ISREG(st.st_mode))
    return fail(make_error(errc::storage_failed,
                           ref.path + " is not a regular file: refused"));
  if (static_cast<std::uint64_t>(st.st_size) != ref.size)
    return fail(make_error(errc::malformed_input,
                           ref.path + " holds " + std::to_string(st.st_size)
                             + " bytes, expected " + std::to_string(ref.size)));
  size = static_cast<std::size_t>(st.st_size);
  return caf::none;
}

// Reads n bytes at `pos` into `out`, feeding each block to `sum` (if any)
// right after the kernel copied it (still in cache).
caf::error read_at(const storage_ref& ref, int fd, std::size_t pos,
                   std::uint8_t* out, std::size_t n, checksum64_stream* sum) {
  std::size_t done = 0;
  while (done < n) {
    auto want = std::min(io_block, n - done);
    auto k = ::pread(fd, out + done, want, static_cast<off_t>(pos + done));
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return make_error(errc::storage_failed, sys_error("read " + ref.path));
    }
    if (k == 0)
      return bad(ref, "truncated while reading");
    if (sum != nullptr)
      sum->update(out + done, static_cast<std::size_t>(k));
    done += static_cast<std::size_t>(k);
  }
  return caf::none;
}

} // namespace

namespace detail {

caf::error read_storage(const storage_ref& ref, writable_bytes& out) {
  int fd = -1;
  std::size_t size = 0;
  if (auto err = open_storage(ref, fd, size))
    return err;
  writable_bytes buf{size};
  auto err = read_at(ref, fd, 0, buf.data(), size, nullptr);
  ::close(fd);
  if (err)
    return err;
  out = std::move(buf);
  return caf::none;
}

} // namespace detail

caf::error confine(const storage_ref& ref, const storage_options& opts) {
  auto refuse = [&](const std::string& why) {
    count(trust_event::message_rejected);
    return make_error(errc::unauthorized,
                      "refused storage reference '" + ref.path.substr(0, 256)
                        + "': " + why);
  };
  // A plain name this library could have made: "dice." and then no path
  // separator, no parent reference, nothing a shell or kernel treats
  // specially.
  auto plain = [](const std::string& name) {
    if (name.size() < 6 || name.size() > 240
        || name.compare(0, 5, "dice.") != 0)
      return false;
    if (name.find("..") != std::string::npos)
      return false;
    for (auto c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'
            || c == '-'))
        return false;
    return true;
  };
  if (ref.kind == storage_kind::shm) {
    if (ref.path.empty() || ref.path[0] != '/' || !plain(ref.path.substr(1)))
      return refuse("not a dice shared-memory name");
    return caf::none;
  }
  if (ref.kind != storage_kind::file)
    return refuse("unknown kind");
  std::filesystem::path path{ref.path};
  auto name = path.filename().string();
  if (!plain(name))
    return refuse("not a dice file name");
  std::error_code ec;
  auto dir = std::filesystem::canonical(path.parent_path(), ec);
  if (ec)
    return refuse("its directory cannot be resolved: " + ec.message());
  auto own = std::filesystem::canonical(opts.dirname, ec);
  if (ec)
    return refuse("this loader's directory " + opts.dirname
                  + " cannot be resolved: " + ec.message());
  if (dir != own)
    return refuse("outside this loader's directory " + own.string());
  return caf::none;
}

caf::error remove_storage(const storage_ref& ref) {
  if (ref.kind == storage_kind::shm && recycle_shm(ref))
    return caf::none;
  int rc = ref.kind == storage_kind::shm ? ::shm_unlink(ref.path.c_str())
                                         : ::unlink(ref.path.c_str());
  if (rc != 0 && errno != ENOENT)
    return make_error(errc::storage_failed, sys_error("remove " + ref.path));
  return caf::none;
}

// Layout: magic(8) | meta_len(8) | meta (CAF binary) | payload bytes.
caf::expected<storage_ref> store(const storage_options& opts,
                                 const model_snapshot& x) {
  std::vector<char> head;
  head.insert(head.end(), snapshot_magic, snapshot_magic + 8);
  put_u64(head, 0);
  {
    auto meta = x;
    meta.data = shared_bytes{};
    caf::binary_serializer sink{nullptr, head};
    if (auto err = sink(meta))
      return err;
  }
  auto meta_len = head.size() - 16;
  std::memcpy(head.data() + 8, &meta_len, 8);
  std::vector<byte_span> parts{
    {reinterpret_cast<const std::uint8_t*>(head.data()), head.size()},
    {x.data.data(), x.data.size()}};
  return store_bytes(opts, parts);
}

caf::expected<storage_ref> store(const storage_options& opts,
                                 const context_delta& x) {
  std::vector<char> buf;
  buf.insert(buf.end(), context_magic, context_magic + 8);
  put_u64(buf, 0);
  {
    caf::binary_serializer sink{nullptr, buf};
    auto copy = x;
    if (auto err = sink(copy))
      return err;
  }
  auto len = buf.size() - 16;
  std::memcpy(buf.data() + 8, &len, 8);
  std::vector<byte_span> parts{
    {reinterpret_cast<const std::uint8_t*>(buf.data()), buf.size()}};
  return store_bytes(opts, parts);
}

caf::expected<model_snapshot> load_snapshot(const storage_ref& ref) {
  // read() into a fresh, uninitialized buffer instead of mmap + copy: no
  // mapping, no page-table work, no zero-fill; each block is hashed right
  // after the kernel copied it.
  int fd = -1;
  std::size_t size = 0;
  if (auto err = open_storage(ref, fd, size))
    return err;
  struct closer {
    int fd;
    ~closer() {
      ::close(fd);
    }
  } guard{fd};
  checksum64_stream sum{0};
  std::uint8_t head[16];
  if (size < 16)
    return bad(ref, "not a dice snapshot file");
  if (auto err = read_at(ref, fd, 0, head, 16, &sum))
    return err;
  if (std::memcmp(head, snapshot_magic, 8) != 0)
    return bad(ref, "not a dice snapshot file");
  auto meta_len = get_u64(head + 8);
  if (meta_len > size - 16)
    return bad(ref, "truncated header");
  std::vector<std::uint8_t> meta(static_cast<std::size_t>(meta_len));
  if (auto err = read_at(ref, fd, 16, meta.data(), meta.size(), &sum))
    return err;
  auto body_len = size - 16 - static_cast<std::size_t>(meta_len);
  writable_bytes body{body_len};
  // The stored checksum chains the header part into the body's seed.
  checksum64_stream body_sum{sum.digest()};
  if (auto err = read_at(ref, fd, 16 + meta.size(), body.data(), body_len,
                         &body_sum))
    return err;
  if (ref.checksum != 0 && body_sum.digest() != ref.checksum)
    return make_error(errc::malformed_input,
                      ref.path + ": checksum mismatch (changed or corrupt)");
  model_snapshot result;
  caf::binary_deserializer src{
    nullptr, reinterpret_cast<const char*>(meta.data()), meta.size()};
  if (auto err = src(result))
    return bad(ref, "bad header: " + caf::to_string(err));
  // A fresh buffer: what a callback gets is never overwritten later.
  result.data = shared_bytes{std::move(body)};
  if (auto err = validate(result))
    return err;
  return result;
}

caf::expected<context_delta> load_context(const storage_ref& ref) {
  // pread into a private buffer (with_stored_bytes): the checksum and the
  // decoder see the same bytes, whatever a writer does to the item.
  context_delta result;
  auto err = with_stored_bytes(
    ref, [&](const std::uint8_t* data, std::size_t size) -> caf::error {
      std::uint64_t len = 0;
      if (auto err = check_header(ref, data, size, context_magic, len))
        return err;
      if (auto err = verify(ref, {{data, size}}))
        return err;
      caf::binary_deserializer src{nullptr,
                                   reinterpret_cast<const char*>(data + 16),
                                   static_cast<std::size_t>(len)};
      if (auto err = src(result))
        return bad(ref, "bad context: " + caf::to_string(err));
      if (src.remaining() != 0)
        return bad(ref, "trailing bytes after the context");
      return caf::none;
    });
  if (err)
    return err;
  return result;
}

} // namespace dice

namespace dice {

storage_keeper::~storage_keeper() {
  clear();
}

std::size_t storage_keeper::sweep(time_point now) {
  // Items are added in completion order, so expiries are sorted.
  std::size_t n = 0;
  while (n < items_.size() && items_[n].first <= now) {
    remove_storage(items_[n].second);
    ++n;
  }
  items_.erase(items_.begin(), items_.begin() + static_cast<long>(n));
  return n;
}

void storage_keeper::clear() {
  for (auto& item : items_)
    remove_storage(item.second);
  items_.clear();
}

} // namespace dice
