#include "dice/messages/model_snapshot.hpp"

#include "dice/core/errc.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/security/trust.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

namespace dice {

std::size_t element_size(dtype x) noexcept {
  switch (x) {
    case dtype::float32: return 4;
    case dtype::float64: return 8;
    case dtype::float16: return 2;
    case dtype::bfloat16: return 2;
    case dtype::int64: return 8;
    case dtype::int32: return 4;
    case dtype::int16: return 2;
    case dtype::int8: return 1;
    case dtype::uint8: return 1;
    case dtype::boolean: return 1;
  }
  return 0;
}

const char* to_string(dtype x) noexcept {
  switch (x) {
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::int64: return "int64";
    case dtype::int32: return "int32";
    case dtype::int16: return "int16";
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::boolean: return "bool";
  }
  return "unknown";
}

bool operator==(const tensor_entry& x, const tensor_entry& y) {
  return x.name == y.name && x.type == y.type && x.shape == y.shape
    && x.offset == y.offset && x.nbytes == y.nbytes;
}

bool operator==(const model_snapshot& x, const model_snapshot& y) {
  return x.sender == y.sender && x.incarnation == y.incarnation
    && x.version == y.version && x.send_time_ns == y.send_time_ns
    && x.index == y.index && x.data == y.data;
}

bool operator==(const storage_ref& x, const storage_ref& y) {
  return x.kind == y.kind && x.path == y.path && x.host == y.host
    && x.size == y.size && x.checksum == y.checksum && x.origin == y.origin;
}

bool operator==(const finish& x, const finish& y) {
  return x.sender == y.sender && x.reason == y.reason && x.failed == y.failed;
}

caf::error validate(const model_snapshot& x) {
  auto bad = [&](const tensor_entry& e, const std::string& why) {
    count(trust_event::snapshot_rejected);
    return make_error(errc::malformed_input,
                      "snapshot v" + std::to_string(x.version) + " from node "
                        + std::to_string(x.sender) + ": tensor '" + e.name
                        + "' " + why);
  };
  std::set<std::string> names;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  ranges.reserve(x.index.size());
  const auto buf_size = static_cast<std::uint64_t>(x.data.size());
  for (auto& e : x.index) {
    auto esize = element_size(e.type);
    if (esize == 0)
      return bad(e,
                 "has an unknown dtype ("
                   + std::to_string(static_cast<int>(e.type)) + ")");
    if (!names.insert(e.name).second)
      return bad(e, "appears twice");
    if (e.shape.size() > 64)
      return bad(e, "has " + std::to_string(e.shape.size()) + " dimensions");
    std::uint64_t elems = 1;
    for (auto d : e.shape) {
      if (d < 0)
        return bad(e, "has a negative dimension");
      auto ud = static_cast<std::uint64_t>(d);
      if (ud != 0 && elems > std::numeric_limits<std::uint64_t>::max() / ud)
        return bad(e, "has an overflowing shape");
      elems *= ud;
    }
    if (elems > buf_size / esize + 1 || elems * esize != e.nbytes)
      return bad(e,
                 "claims " + std::to_string(e.nbytes)
                   + " bytes, its shape and dtype need "
                   + std::to_string(elems * esize));
    if (e.offset > buf_size || e.nbytes > buf_size - e.offset)
      return bad(
        e, "lies outside the buffer (" + std::to_string(buf_size) + " bytes)");
    if (e.nbytes > 0)
      ranges.emplace_back(e.offset, e.offset + e.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) {
      count(trust_event::snapshot_rejected);
      return make_error(errc::malformed_input,
                        "snapshot v" + std::to_string(x.version)
                          + ": tensors overlap in the buffer");
    }
  return caf::none;
}

namespace {

// Snapshots up to this size are hashed as the builder copies them in.
// Measured (snapshot_bench, 2-vCPU VM): at 6.8 MB the copy with the hash
// runs at memcpy's speed (0.99x); at 1 MB it costs 16 us more than the copy
// alone, and saves the data plane's writer 23 us before a round's first
// byte (more with several peers, whose writers waited on one hash); at
// 100 MB it cost 5.5 ms more than the copy, above the writer's own hash,
// which overlaps its 2 MiB writes there. Above: the writer hashes.
constexpr std::size_t hash_limit = std::size_t{8} << 20;

constexpr std::size_t alignment = 64;

std::size_t align_up(std::size_t n) {
  return (n + alignment - 1) / alignment * alignment;
}

} // namespace

snapshot_builder::snapshot_builder(std::size_t total_bytes)
  // Shareable: a same-host peer maps these very pages (no copy into a
  // segment on the way out, net/data_shm.cpp).
  : buf_(writable_bytes::shareable(total_bytes)),
    unhashed_(total_bytes > hash_limit) {
  // nop
}

snapshot_builder::snapshot_builder(snapshot_builder&& other) noexcept = default;

snapshot_builder&
snapshot_builder::operator=(snapshot_builder&& other) noexcept = default;

snapshot_builder::~snapshot_builder() = default;

void snapshot_builder::add(std::string name, dtype type,
                           std::vector<std::int64_t> shape, const void* bytes,
                           std::size_t nbytes) {
  auto offset = align_up(used_);
  auto end = offset + nbytes;
  if (end > buf_.size()) {
    // More than the constructor reserved: grow geometrically.
    writable_bytes bigger{std::max(end, 2 * buf_.size())};
    if (used_ > 0)
      std::memcpy(bigger.data(), buf_.data(), used_);
    buf_ = std::move(bigger);
  }
  if (end > hash_limit) {
    unhashed_ = true;
    sum_.reset();
  } else if (!unhashed_ && !sum_) {
    sum_ = std::make_unique<checksum64_stream>();
  }
  // The padding is zeroed: the buffer is uninitialized, and no byte of this
  // process' heap may leave the node inside a snapshot.
  if (offset > used_) {
    std::memset(buf_.data() + used_, 0, offset - used_);
    if (sum_)
      sum_->update(buf_.data() + used_, offset - used_);
  }
  if (nbytes > 0 && sum_)
    sum_->copy_update(buf_.data() + offset, bytes, nbytes);
  else if (nbytes > 0)
    std::memcpy(buf_.data() + offset, bytes, nbytes);
  used_ = end;
  index_.push_back(
    tensor_entry{std::move(name), type, std::move(shape), offset, nbytes});
}

model_snapshot snapshot_builder::build(std::uint32_t sender,
                                       std::uint64_t incarnation,
                                       std::int64_t version,
                                       std::int64_t send_time_ns) {
  model_snapshot result;
  result.sender = sender;
  result.incarnation = incarnation;
  result.version = version;
  result.send_time_ns = send_time_ns;
  result.index = std::move(index_);
  buf_.shrink(used_);
  // No bytes, or more than hash_limit: no checksum comes with them.
  if (used_ == 0 || !sum_)
    result.data = shared_bytes{std::move(buf_)};
  else
    result.data = shared_bytes{std::move(buf_), sum_->digest()};
  index_.clear();
  buf_ = writable_bytes{};
  used_ = 0;
  sum_.reset();
  unhashed_ = false;
  return result;
}

} // namespace dice
