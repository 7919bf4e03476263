// The file store and what every store shares: unique names, writes that
// checksum on the way, checked opens and reads, removal.
#include "storage_impl.hpp"

namespace dice::storage_detail {

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

// Opens what `ref` points at, checks host, kind and size; fd < 0 afterwards
// only with an error. Never follows a symlink (O_NOFOLLOW) and never blocks
// (O_NONBLOCK: opening a FIFO for reading would wait for a writer for ever);
// only a regular file is read.
caf::error open_storage(const storage_ref& ref, unique_fd& fd,
                        std::size_t& size, struct stat* st_out) {
  fd.reset();
  constexpr int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (ref.kind == storage_kind::shm) {
    if (ref.host != this_host())
      return make_error(errc::storage_failed,
                        "shared memory " + ref.path + " lives on host "
                          + ref.host + ", this is " + this_host());
    fd.reset(::shm_open(ref.path.c_str(), flags, 0));
  } else {
    fd.reset(::open(ref.path.c_str(), flags));
  }
  if (!fd) {
    if (errno == ENOENT)
      return make_error(errc::storage_missing, ref.path + " does not exist");
    if (errno == ELOOP)
      return make_error(errc::storage_failed,
                        ref.path + " is a symbolic link: refused");
    return make_error(errc::storage_failed, sys_error("open " + ref.path));
  }
  auto fail = [&](caf::error err) {
    fd.reset();
    return err;
  };
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return fail(
      make_error(errc::storage_failed, sys_error("stat " + ref.path)));
  if (!S_ISREG(st.st_mode))
    return fail(make_error(errc::storage_failed,
                           ref.path + " is not a regular file: refused"));
  // Loaders store with mode 0600 as this user; anything else was planted
  // or changed by someone else.
  if (auto err = refuse_foreign_file(st.st_uid, st.st_mode, ref.path))
    return fail(std::move(err));
  if (static_cast<std::uint64_t>(st.st_size) != ref.size)
    return fail(make_error(errc::malformed_input,
                           ref.path + " holds " + std::to_string(st.st_size)
                             + " bytes, expected " + std::to_string(ref.size)));
  size = static_cast<std::size_t>(st.st_size);
  if (st_out != nullptr)
    *st_out = st;
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

} // namespace dice::storage_detail

namespace dice {

using namespace storage_detail;

namespace {

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
  unique_fd fd{
    ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600)};
  if (!fd)
    return make_error(errc::storage_failed, sys_error("cannot create " + tmp));
  std::uint64_t checksum = 0;
  if (auto err = write_parts(fd.get(), parts, checksum)) {
    fd.reset();
    ::unlink(tmp.c_str());
    return err;
  }
  fd.reset();
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

namespace detail {

caf::error read_storage(const storage_ref& ref, writable_bytes& out) {
  unique_fd fd;
  std::size_t size = 0;
  struct stat st;
  if (auto err = open_storage(ref, fd, size, &st))
    return err;
  auto view = ref.kind == storage_kind::shm ? map_view(fd.get(), st)
                                            : item_view{};
  writable_bytes buf{size};
  auto err = read_part(ref, fd.get(), view, 0, buf.data(), size, nullptr);
  fd.reset();
  if (err)
    return err;
  out = std::move(buf);
  return caf::none;
}

} // namespace detail

caf::error remove_storage(const storage_ref& ref) {
  if (ref.kind == storage_kind::shm && recycle_shm(ref))
    return caf::none;
  int rc = ref.kind == storage_kind::shm ? ::shm_unlink(ref.path.c_str())
                                         : ::unlink(ref.path.c_str());
  if (rc != 0 && errno != ENOENT)
    return make_error(errc::storage_failed, sys_error("remove " + ref.path));
  return caf::none;
}

} // namespace dice
