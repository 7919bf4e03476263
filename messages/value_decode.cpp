// dice::value's decoder: iterative, every count checked against the bytes
// left before anything is allocated; arrays view the received bytes.

#include "dice/messages/value.hpp"
#include "dice/security/trust.hpp"
#include "messages/value_format.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>

namespace dice {

using namespace value_detail;

namespace {

struct open_container {
  value* node;
  std::uint64_t left;
  std::size_t start;
};

class value_decoder {
 public:
  value_decoder(const shared_bytes& bytes, const value_limits& limits)
    : bytes_(bytes), data_(bytes.data()), size_(bytes.size()), limits_(limits) {
  }

  // Iterative (an explicit stack of open containers): no input and no
  // max_depth can exhaust the C stack.
  caf::error run(value& root) {
    if (size_ > limits_.max_bytes)
      return fail(std::to_string(size_) + " bytes, more than "
                    + std::to_string(limits_.max_bytes),
                  0);
    if (size_ < 4 || std::memcmp(data_, magic, 3) != 0)
      return fail("bad magic", 0);
    if (data_[3] != magic[3])
      return fail("unknown version " + std::to_string(data_[3]), 3);
    pos_ = 4;
    std::vector<open_container> stack;
    for (value* slot = &root; slot != nullptr;) {
      auto start = pos_;
      std::uint64_t n = 0;
      if (auto err = read_node(*slot, stack.size() + 1, n))
        return err;
      if (n > 0)
        stack.push_back(open_container{slot, n, start});
      slot = nullptr;
      while (!stack.empty() && stack.back().left == 0) {
        auto& done = *stack.back().node;
        if (done.kind == value_kind::dict && has_duplicate(done.keys))
          return fail("duplicate dict key", stack.back().start);
        stack.pop_back();
      }
      if (stack.empty())
        break;
      auto& top = stack.back();
      --top.left;
      if (top.node->kind == value_kind::dict) {
        std::string key;
        if (auto err = read_text(key, true))
          return err;
        top.node->keys.push_back(std::move(key));
      }
      slot = &top.node->items.emplace_back();
    }
    if (pos_ != size_)
      return fail("trailing bytes", pos_);
    return caf::none;
  }

  std::size_t pos() const noexcept {
    return pos_;
  }

 private:
  caf::error fail(std::string what, std::size_t at) const {
    return value_error(errc::malformed_input,
                       std::move(what) + " at offset " + std::to_string(at));
  }

  std::size_t left() const noexcept {
    return size_ - pos_;
  }

  // The next `n` bytes, or nullptr (and nothing consumed) past the end.
  const std::uint8_t* take(std::uint64_t n) {
    if (n > left())
      return nullptr;
    auto p = data_ + pos_;
    pos_ += n;
    return p;
  }

  bool read_u64(std::uint64_t& x) {
    auto p = take(8);
    if (p != nullptr)
      std::memcpy(&x, p, 8);
    return p != nullptr;
  }

  caf::error truncated() const {
    return fail("truncated", pos_);
  }

  caf::error read_text(std::string& out, bool utf8) {
    auto at = pos_;
    std::uint64_t n = 0;
    if (!read_u64(n))
      return truncated();
    auto p = take(n);
    if (p == nullptr)
      return fail(std::to_string(n) + " bytes claimed, "
                    + std::to_string(left()) + " left",
                  at);
    if (auto bad = utf8 ? utf8_error(p, n) : n; bad != n)
      return fail("invalid UTF-8", at + 8 + bad);
    out.assign(reinterpret_cast<const char*>(p), n);
    return caf::none;
  }

  // Reads one node into `x`; a container's item count goes to `n` (its
  // items come next, read by run()).
  caf::error read_node(value& x, std::size_t depth, std::uint64_t& n) {
    auto at = pos_;
    if (depth > limits_.max_depth)
      return fail("nested deeper than " + std::to_string(limits_.max_depth),
                  at);
    if (++nodes_ > limits_.max_values)
      return fail("more than " + std::to_string(limits_.max_values) + " values",
                  at);
    auto p = take(1);
    if (p == nullptr)
      return truncated();
    switch (*p) {
      case tag_none: x.kind = value_kind::none; break;
      case tag_false:
      case tag_true:
        x.kind = value_kind::boolean;
        x.boolean = *p == tag_true;
        break;
      case tag_int:
      case tag_real: {
        auto q = take(8);
        if (q == nullptr)
          return truncated();
        x.kind = *p == tag_int ? value_kind::integer : value_kind::real;
        std::memcpy(*p == tag_int ? static_cast<void*>(&x.integer) : &x.real, q,
                    8);
        break;
      }
      case tag_str:
      case tag_bytes:
        x.kind = *p == tag_str ? value_kind::string : value_kind::bytes;
        return read_text(x.text, *p == tag_str);
      case tag_list:
      case tag_tuple:
      case tag_dict: {
        x.kind = *p == tag_list ? value_kind::list
          : *p == tag_tuple     ? value_kind::tuple
                                : value_kind::dict;
        if (!read_u64(n))
          return truncated();
        // Each item takes at least 1 byte (a dict's 9): a count beyond the
        // bytes left is a lie, refused before anything is allocated.
        auto least = x.kind == value_kind::dict ? 9 : 1;
        if (n > left() / least)
          return fail(std::to_string(n) + " items claimed, "
                        + std::to_string(left()) + " bytes left",
                      at);
        // Nor may the items exceed max_values (a value takes ~176 bytes
        // decoded: 1 byte each on the wire would be a 176x amplification).
        if (n > limits_.max_values - std::min(nodes_, limits_.max_values))
          return fail(std::to_string(n) + " items claimed, more than "
                        + std::to_string(limits_.max_values) + " values",
                      at);
        x.items.reserve(n);
        if (x.kind == value_kind::dict)
          x.keys.reserve(n);
        break;
      }
      case tag_array: x.kind = value_kind::array; return read_array(x.array);
      default: return fail("unknown tag " + std::to_string(*p), at);
    }
    return caf::none;
  }

  caf::error read_array(value_array& x) {
    auto at = pos_;
    auto head = take(3);
    if (head == nullptr)
      return truncated();
    x.type = static_cast<dtype>(head[0]);
    x.flavor = static_cast<array_flavor>(head[1]);
    std::size_t ndim = head[2];
    if (element_size(x.type) == 0)
      return fail("unknown dtype " + std::to_string(head[0]), at);
    if (x.flavor > array_flavor::numpy_scalar)
      return fail("unknown array flavor " + std::to_string(head[1]), at + 1);
    if (ndim > limits_.max_ndim)
      return fail(std::to_string(ndim) + " dimensions", at + 2);
    if (x.flavor == array_flavor::numpy_scalar && ndim > 0)
      return fail("numpy scalar with dimensions", at + 2);
    auto dims = take(8 * ndim);
    if (dims == nullptr)
      return truncated();
    x.shape.resize(ndim);
    if (ndim > 0) // a 0-d array's shape has no data() to copy to
      std::memcpy(x.shape.data(), dims, 8 * ndim);
    std::uint64_t expected = 0, nbytes = 0;
    if (!array_bytes(x.type, x.shape, expected))
      return fail("negative or overflowing shape", at + 3);
    if (!read_u64(nbytes))
      return truncated();
    if (nbytes != expected)
      return fail("array of " + std::to_string(nbytes)
                    + " bytes does not match its shape ("
                    + std::to_string(expected) + ")",
                  pos_ - 8);
    auto pad_at = pos_;
    auto pad = take(pad64(pos_) - pos_);
    if (pad == nullptr)
      return truncated();
    if (std::any_of(pad, data_ + pos_, [](auto b) {
          return b != 0;
        }))
      return fail("nonzero padding", pad_at);
    auto p = take(nbytes);
    if (p == nullptr)
      return fail(std::to_string(nbytes) + " bytes of array data claimed, "
                    + std::to_string(left()) + " left",
                  pos_);
    x.nbytes = nbytes;
    if (nbytes == 0)
      return caf::none;
    if (reinterpret_cast<std::uintptr_t>(p) % element_size(x.type) == 0) {
      // A view into the received bytes, which the array keeps alive.
      if (!owner_)
        owner_ = std::make_shared<const shared_bytes>(bytes_);
      x.data = p;
      x.owner = owner_;
    } else {
      writable_bytes copy{nbytes};
      std::memcpy(copy.data(), p, nbytes);
      auto own = std::make_shared<const shared_bytes>(std::move(copy));
      x.data = own->data();
      x.owner = std::move(own);
    }
    return caf::none;
  }

  const shared_bytes& bytes_;
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::uint64_t nodes_ = 0;
  const value_limits& limits_;
  std::shared_ptr<const void> owner_;
};

caf::error decode_root(const shared_bytes& bytes, const value_limits& limits,
                       value& out) {
  value_decoder d{bytes, limits};
  try {
    return d.run(out);
  } catch (const std::exception& e) { // bad_alloc from a string or vector
    return value_error(errc::malformed_input,
                       std::string{"cannot decode ("} + e.what()
                         + ") at offset " + std::to_string(d.pos()));
  }
}

} // namespace

caf::expected<value> decode_value(const shared_bytes& bytes,
                                  const value_limits& limits) {
  value result;
  if (auto err = decode_root(bytes, limits, result)) {
    dice::count(trust_event::payload_rejected);
    return err;
  }
  return result;
}

caf::error unpack_values_into(const payload& x, std::vector<value>& out) {
  value list;
  auto err = decode_root(x.bytes, {}, list);
  if (!err && list.kind != value_kind::list)
    err = value_error(errc::malformed_input,
                      std::string{"items must be a list, not "}
                        + to_string(list.kind) + " at offset 4");
  if (!err && list.items.size() != x.count)
    err = value_error(errc::malformed_input,
                      "payload holds " + std::to_string(list.items.size())
                        + " items but claims " + std::to_string(x.count)
                        + " at offset 4");
  if (!err) {
    try {
      out.reserve(out.size() + list.items.size());
    } catch (const std::exception&) {
      err = value_error(errc::malformed_input, "cannot allocate the items");
    }
  }
  if (err) {
    dice::count(trust_event::payload_rejected);
    return err;
  }
  // Moves of a value do not throw: `out` gets every item or none.
  std::move(list.items.begin(), list.items.end(), std::back_inserter(out));
  return caf::none;
}

caf::expected<std::vector<value>>
unpack_values(const std::vector<payload>& xs) {
  std::vector<value> result;
  for (auto& x : xs)
    if (auto err = unpack_values_into(x, result))
      return err;
  return result;
}

} // namespace dice
