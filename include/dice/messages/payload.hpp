#pragma once

#include "dice/core/errc.hpp"
#include "dice/messages/bounded_archive.hpp"
#include "dice/messages/shared_bytes.hpp"
#include "dice/security/trust.hpp"

#include "caf/expected.hpp"
#include "caf/meta/type_name.hpp"

#include <boost/archive/binary_oarchive.hpp>
#include <boost/iostreams/device/array.hpp>
#include <boost/iostreams/stream.hpp>
#include <boost/serialization/vector.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace dice {

/// A list of user items (transitions, episodes, ...) as Boost.Serialization
/// bytes. dice never interprets the items; only the program that packed them
/// (and its peers, which share the type) unpacks them.
struct payload {
  /// Boost binary archive of a `std::vector<T>`.
  shared_bytes bytes;
  /// Number of items in the archive.
  std::uint64_t count = 0;
  /// Node that produced the items.
  std::uint32_t origin = 0;
  /// Model version that produced the items (-1: unknown).
  std::int64_t model_version = -1;
};

/// Equality of all fields (bytes compared by content).
bool operator==(const payload& x, const payload& y);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, payload& x) {
  return f(caf::meta::type_name("dice::payload"), x.bytes, x.count, x.origin,
           x.model_version);
}

namespace detail {

/// A Boost.Iostreams sink appending to a byte vector (Boost archives need a
/// `char` stream; our buffers hold `uint8_t`).
struct byte_sink {
  using char_type = char;
  using category = boost::iostreams::sink_tag;
  std::vector<std::uint8_t>* out;
  std::streamsize write(const char* s, std::streamsize n) {
    auto p = reinterpret_cast<const std::uint8_t*>(s);
    out->insert(out->end(), p, p + n);
    return n;
  }
};

} // namespace detail

/// Packs `items` with Boost.Serialization; `T` needs a `serialize()` (free in
/// `boost::serialization` or a member) like any Boost-serializable type.
template <class T>
payload pack(const std::vector<T>& items, std::uint32_t origin = 0,
             std::int64_t model_version = -1) {
  std::vector<std::uint8_t> buf;
  {
    namespace io = boost::iostreams;
    io::stream<detail::byte_sink> out{detail::byte_sink{&buf}};
    boost::archive::binary_oarchive ar(out);
    ar << items;
  }
  return payload{shared_bytes{std::move(buf)}, items.size(), origin,
                 model_version};
}

/// Unpacks one payload, appending its items to `out`. Corrupt, truncated,
/// oversized or inconsistent bytes give `errc::malformed_input` (and count
/// as `trust_event::payload_rejected`); `out` is left unchanged then. No
/// count read from the bytes can make the decoder allocate more than a small
/// multiple of the payload's size (see bounded_archive.hpp).
template <class T>
caf::error unpack_into(const payload& x, std::vector<T>& out) {
  auto reject = [](std::string what) {
    dice::count(trust_event::payload_rejected);
    return make_error(errc::malformed_input, std::move(what));
  };
  if (x.bytes.empty())
    return reject("empty payload");
  // A claimed count beyond the bytes is a lie: refuse before decoding.
  if (x.count > x.bytes.size())
    return reject("payload claims " + std::to_string(x.count) + " items in "
                  + std::to_string(x.bytes.size()) + " bytes");
  std::vector<T> items;
  try {
    bounded_streambuf buf{x.bytes.data(), x.bytes.size()};
    bounded_iarchive ar(buf);
    ar >> items;
  } catch (const std::exception& e) {
    return reject(std::string{"cannot decode payload: "} + e.what());
  }
  if (items.size() != x.count)
    return reject("payload holds " + std::to_string(items.size())
                  + " items but claims " + std::to_string(x.count));
  out.insert(out.end(), std::make_move_iterator(items.begin()),
             std::make_move_iterator(items.end()));
  return caf::none;
}

/// Unpacks and concatenates several payloads (e.g. a learner's merged
/// `ctx.trajectories`), in order.
template <class T>
caf::expected<std::vector<T>> unpack(const std::vector<payload>& xs) {
  std::vector<T> result;
  for (auto& x : xs)
    if (auto err = unpack_into(x, result))
      return err;
  return result;
}

/// Unpacks a single payload.
template <class T>
caf::expected<std::vector<T>> unpack(const payload& x) {
  std::vector<T> result;
  if (auto err = unpack_into(x, result))
    return err;
  return result;
}

/// Total number of items in a list of payloads.
std::uint64_t item_count(const std::vector<payload>& xs);

} // namespace dice
