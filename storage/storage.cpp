// The stored formats of a snapshot and a context delta: header, CAF
// meta, payload, checksum; what is read is checked before it is used.
#include "storage_impl.hpp"

namespace dice::storage_detail {

caf::error bad(const storage_ref& ref, const std::string& why) {
  return make_error(errc::malformed_input, ref.path + ": " + why);
}

} // namespace dice::storage_detail

namespace dice {

using namespace storage_detail;

namespace {

constexpr char snapshot_magic[8] = {'D', 'I', 'C', 'E', 'S', 'N', 'P', '1'};
constexpr char context_magic[8] = {'D', 'I', 'C', 'E', 'C', 'T', 'X', '1'};

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
  // Copied into a fresh, uninitialized buffer (never handed out in place:
  // anyone who can write the item could change it after the check) and
  // hashed from what was copied: what is verified is what is returned. A
  // shared-memory item is copied through a view kept for the next load of the
  // same segment (pread looks up and locks every 4 KiB page: 3x a memcpy); a
  // file with pread.
  unique_fd owner; // closed on every return
  std::size_t size = 0;
  struct stat st;
  if (auto err = open_storage(ref, owner, size, &st))
    return err;
  auto fd = owner.get();
  auto view = ref.kind == storage_kind::shm ? map_view(fd, st) : item_view{};
  checksum64_stream sum{0};
  std::uint8_t head[16];
  if (size < 16)
    return bad(ref, "not a dice snapshot file");
  if (auto err = read_part(ref, fd, view, 0, head, 16, &sum))
    return err;
  if (std::memcmp(head, snapshot_magic, 8) != 0)
    return bad(ref, "not a dice snapshot file");
  auto meta_len = get_u64(head + 8);
  if (meta_len > size - 16)
    return bad(ref, "truncated header");
  std::vector<std::uint8_t> meta(static_cast<std::size_t>(meta_len));
  if (auto err = read_part(ref, fd, view, 16, meta.data(), meta.size(), &sum))
    return err;
  auto body_len = size - 16 - static_cast<std::size_t>(meta_len);
  writable_bytes body{body_len};
  // The stored checksum chains the header part into the body's seed; the
  // body is hashed in the pass that copies it (copy_hash).
  std::uint64_t body_sum = 0;
  if (auto err = read_part_hashed(ref, fd, view, 16 + meta.size(), body.data(),
                                  body_len, sum.digest(), body_sum))
    return err;
  if (ref.checksum != 0 && body_sum != ref.checksum)
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
