#include "net/data_meta.hpp"

#include "dice/core/errc.hpp"

#include <cstring>

namespace dice::net {

namespace {

template <class T>
void put(std::string& out, T x) {
  char buf[sizeof(T)];
  auto u = static_cast<std::uint64_t>(x);
  for (int i = sizeof(T) - 1; i >= 0; --i, u >>= 8)
    buf[i] = static_cast<char>(u & 0xff);
  out.append(buf, sizeof(T));
}

void put_str(std::string& out, const std::string& x) {
  put(out, static_cast<std::uint32_t>(x.size()));
  out += x;
}

// Reads from the front of a span that shrinks; every read checks the bytes
// left first, and a failed read leaves `ok` false for good.
struct reader {
  const char* p;
  std::size_t left;
  bool ok = true;

  template <class T>
  T get() {
    if (!ok || left < sizeof(T)) {
      ok = false;
      return T{};
    }
    std::uint64_t u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      u = (u << 8) | static_cast<std::uint8_t>(p[i]);
    p += sizeof(T);
    left -= sizeof(T);
    return static_cast<T>(u);
  }

  std::string str() {
    auto n = get<std::uint32_t>();
    if (!ok || n > left) {
      ok = false;
      return {};
    }
    std::string s{p, n};
    p += n;
    left -= n;
    return s;
  }
};

// An entry takes at least its fixed fields: name_len, dtype, ndim, offset,
// nbytes.
constexpr std::size_t min_entry = 4 + 1 + 4 + 8 + 8;

} // namespace

std::string encode_meta(const std::string& topic, std::uint32_t sender,
                        const model_snapshot& x) {
  std::string out;
  out.reserve(64 + topic.size() + x.index.size() * 64);
  put_str(out, topic);
  put(out, sender);
  put(out, x.sender);
  put(out, x.incarnation);
  put(out, x.version);
  put(out, x.send_time_ns);
  put(out, static_cast<std::uint32_t>(x.index.size()));
  for (auto& e : x.index) {
    put_str(out, e.name);
    put(out, static_cast<std::uint8_t>(e.type));
    put(out, static_cast<std::uint32_t>(e.shape.size()));
    for (auto d : e.shape)
      put(out, d);
    put(out, e.offset);
    put(out, e.nbytes);
  }
  return out;
}

caf::expected<data_meta> decode_meta(const char* data, std::size_t size) {
  auto bad = [](const char* what) {
    return make_error(errc::malformed_input,
                      std::string{"snapshot header: "} + what);
  };
  if (size > max_data_meta_bytes)
    return bad("too long");
  reader in{data, size};
  data_meta x;
  x.topic = in.str();
  x.sender = in.get<std::uint32_t>();
  x.header.sender = in.get<std::uint32_t>();
  x.header.incarnation = in.get<std::uint64_t>();
  x.header.version = in.get<std::int64_t>();
  x.header.send_time_ns = in.get<std::int64_t>();
  auto n = in.get<std::uint32_t>();
  if (!in.ok || n > in.left / min_entry)
    return bad("cut short");
  x.header.index.reserve(n);
  for (std::uint32_t i = 0; i < n && in.ok; ++i) {
    tensor_entry e;
    e.name = in.str();
    auto t = in.get<std::uint8_t>();
    if (in.ok && element_size(static_cast<dtype>(t)) == 0)
      return bad("unknown dtype");
    e.type = static_cast<dtype>(t);
    auto ndim = in.get<std::uint32_t>();
    if (!in.ok || ndim > in.left / 8)
      return bad("cut short");
    e.shape.reserve(ndim);
    for (std::uint32_t k = 0; k < ndim; ++k)
      e.shape.push_back(in.get<std::int64_t>());
    e.offset = in.get<std::uint64_t>();
    e.nbytes = in.get<std::uint64_t>();
    x.header.index.push_back(std::move(e));
  }
  if (!in.ok)
    return bad("cut short");
  if (in.left != 0)
    return bad("bytes left over");
  return x;
}

} // namespace dice::net
