#include "dice/messages/storage.hpp"

#include "dice/errc.hpp"
#include "dice/messages/snapshot_chunk.hpp"

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
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
std::string unique_name(const storage_options& opts, const char* suffix) {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t tag = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  char buf[96];
  std::snprintf(buf, sizeof(buf), "dice.%u.%ld.%016llx.%llu%s", opts.node,
                static_cast<long>(::getpid()),
                static_cast<unsigned long long>(tag),
                static_cast<unsigned long long>(++counter), suffix);
  return buf;
}

caf::error write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    auto k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return make_error(errc::storage_failed, sys_error("write"));
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
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
  for (auto& [p, n] : parts)
    if (auto err = write_all(fd, p, n)) {
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
  return ref;
}

caf::expected<storage_ref> store_shm(const storage_options& opts,
                                     const std::vector<byte_span>& parts,
                                     std::size_t total) {
  auto name = "/" + unique_name(opts, "");
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC,
                      0600);
  if (fd < 0)
    return make_error(errc::storage_failed, sys_error("shm_open " + name));
  auto fail = [&](const std::string& what) {
    auto err = make_error(errc::storage_failed, sys_error(what));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return err;
  };
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0)
    return fail("ftruncate " + name);
  if (total > 0) {
    // MAP_POPULATE faults every page in at once instead of one by one.
    auto addr = ::mmap(nullptr, total, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, fd, 0);
    if (addr == MAP_FAILED)
      return fail("mmap " + name);
    auto out = static_cast<std::uint8_t*>(addr);
    for (auto& [p, n] : parts) {
      if (n > 0)
        std::memcpy(out, p, n);
      out += n;
    }
    ::munmap(addr, total);
  }
  ::close(fd);
  storage_ref ref;
  ref.kind = storage_kind::shm;
  ref.path = name;
  ref.host = this_host();
  ref.size = total;
  ref.origin = opts.node;
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
  auto ref = opts.kind == storage_kind::shm ? store_shm(opts, parts, total)
                                            : store_file(opts, parts, total);
  if (ref)
    ref->checksum = checksum_of(parts);
  return ref;
}

namespace detail {

caf::error map_storage(const storage_ref& ref, const std::uint8_t*& data,
                       std::size_t& size) {
  int fd = -1;
  if (ref.kind == storage_kind::shm) {
    if (ref.host != this_host())
      return make_error(errc::storage_failed,
                        "shared memory " + ref.path + " lives on host "
                          + ref.host + ", this is " + this_host());
    fd = ::shm_open(ref.path.c_str(), O_RDONLY | O_CLOEXEC, 0);
  } else {
    fd = ::open(ref.path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT)
      return make_error(errc::storage_missing, ref.path + " does not exist");
    return make_error(errc::storage_failed, sys_error("open " + ref.path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    auto err = make_error(errc::storage_failed, sys_error("stat " + ref.path));
    ::close(fd);
    return err;
  }
  if (static_cast<std::uint64_t>(st.st_size) != ref.size) {
    ::close(fd);
    return make_error(errc::malformed_input,
                      ref.path + " holds " + std::to_string(st.st_size)
                        + " bytes, expected " + std::to_string(ref.size));
  }
  size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    data = nullptr;
    return caf::none;
  }
  auto addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                     0);
  ::close(fd);
  if (addr == MAP_FAILED)
    return make_error(errc::storage_failed, sys_error("mmap " + ref.path));
  data = static_cast<const std::uint8_t*>(addr);
  return caf::none;
}

void unmap_storage(const std::uint8_t* data, std::size_t size) {
  if (data != nullptr && size > 0)
    ::munmap(const_cast<std::uint8_t*>(data), size);
}

} // namespace detail

caf::error remove_storage(const storage_ref& ref) {
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
  model_snapshot result;
  auto err = with_stored_bytes(
    ref, [&](const std::uint8_t* data, std::size_t size) -> caf::error {
      std::uint64_t meta_len = 0;
      if (auto err = check_header(ref, data, size, snapshot_magic, meta_len))
        return err;
      auto body = data + 16 + meta_len;
      auto body_len = size - 16 - meta_len;
      if (auto err = verify(ref, {{data, 16 + meta_len}, {body, body_len}}))
        return err;
      caf::binary_deserializer src{nullptr,
                                   reinterpret_cast<const char*>(data + 16),
                                   static_cast<std::size_t>(meta_len)};
      if (auto err = src(result))
        return bad(ref, "bad header: " + caf::to_string(err));
      // A fresh buffer: what a callback gets is never overwritten later.
      result.data = shared_bytes{
        std::vector<std::uint8_t>(body, body + body_len)};
      return validate(result);
    });
  if (err)
    return err;
  return result;
}

caf::expected<context_delta> load_context(const storage_ref& ref) {
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
