#pragma once

// A Boost binary input archive for untrusted bytes. Boost's own loaders size
// containers from counts read off the input (`vector::resize(count)`,
// `string::resize(len)`) before reading a single element, so a few hostile
// bytes can make them allocate and zero gigabytes. This archive reads the
// same format as `boost::archive::binary_iarchive` (what `dice::pack`
// writes) but limits every reservation by the bytes left, in bytes (count x
// element size, not a count of elements), so the memory a decode can take
// is proportional to its input:
//   - a string's length, and a vector of raw elements (what Boost copies
//     with one load_binary: floats, ints, ...), at most the bytes left;
//   - any other vector, at most `max_expansion` bytes of elements per byte
//     left are reserved up front; past that it grows only as items really
//     decode (each takes at least a byte of input);
//   - any other collection's count, at most the bytes left (Boost reserves
//     nothing for node-based containers).
// A tensor header (dice/torch/tensor.hpp) is checked the same way before its
// buffer is allocated.

#include <boost/archive/archive_exception.hpp>
#include <boost/archive/basic_binary_iarchive.hpp>
#include <boost/archive/basic_binary_iprimitive.hpp>
#include <boost/archive/binary_iarchive_impl.hpp>
#include <boost/archive/detail/register_archive.hpp>
#include <boost/mpl/bool.hpp>
#include <boost/serialization/array_wrapper.hpp>
#include <boost/serialization/collection_size_type.hpp>
#include <boost/serialization/detail/stack_constructor.hpp>
#include <boost/serialization/item_version_type.hpp>
#include <boost/serialization/library_version_type.hpp>
#include <boost/serialization/nvp.hpp>
#include <boost/serialization/vector.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <streambuf>
#include <string>
#include <type_traits>
#include <vector>

namespace dice {

/// A read-only stream buffer over bytes in memory that knows how many bytes
/// are left.
class bounded_streambuf : public std::streambuf {
 public:
  /// Reads `size` bytes at `data` (not copied; must outlive the buffer).
  bounded_streambuf(const void* data, std::size_t size) {
    auto p = const_cast<char*>(static_cast<const char*>(data));
    setg(p, p, p + size);
  }

  /// Bytes not read yet.
  std::size_t remaining() const noexcept {
    return static_cast<std::size_t>(egptr() - gptr());
  }
};

/// `binary_iarchive` with every collection count and string length checked
/// against the bytes left (throws `archive_exception` like Boost does for
/// truncated input). Items must take at least one byte each, which every
/// type with data does.
class bounded_iarchive
  : public boost::archive::binary_iarchive_impl<bounded_iarchive, char,
                                                std::char_traits<char>> {
  using base = boost::archive::binary_iarchive_impl<bounded_iarchive, char,
                                                    std::char_traits<char>>;
  using primitive = boost::archive::basic_binary_iprimitive<
    bounded_iarchive, char, std::char_traits<char>>;
  friend class boost::archive::detail::interface_iarchive<bounded_iarchive>;
  friend class boost::archive::basic_binary_iarchive<bounded_iarchive>;
  friend class boost::archive::load_access;
  friend primitive;

 public:
  /// Bytes of memory a vector of non-raw elements reserves at most per
  /// byte of input left, before its items decode (a 40-byte struct that
  /// encodes in 21 bytes needs 2; larger ones grow as they decode).
  static constexpr std::size_t max_expansion = 16;

  /// Reads an archive (with Boost's header unless `flags` says no_header).
  explicit bounded_iarchive(bounded_streambuf& sb, unsigned int flags = 0)
    : base(sb, flags), sb_(&sb) {
    init(flags);
  }

  /// Bytes of input not read yet.
  std::size_t remaining() const noexcept {
    return sb_->remaining();
  }

  /// Throws unless `count` elements of `size` bytes fit in `factor` times
  /// the bytes left (computed without overflow).
  void require(std::uint64_t count, std::size_t size,
               std::size_t factor = 1) const {
    auto budget = static_cast<long double>(sb_->remaining())
      * static_cast<long double>(factor);
    if (static_cast<long double>(count) * static_cast<long double>(size)
        > budget)
      throw boost::archive::archive_exception(
        boost::archive::archive_exception::input_stream_error,
        "collection larger than the remaining input allows");
  }

 protected:
  using primitive::load;

  /// A string length beyond the input is refused before any allocation.
  void load(std::string& s) {
    std::size_t len = 0;
    load_binary(&len, sizeof(len));
    check(len);
    s.resize(len);
    if (len > 0)
      load_binary(&s[0], len);
  }

  /// Boost only asserts (in debug builds) that a bool is 0 or 1.
  void load(bool& t) {
    unsigned char c = 0;
    load_binary(&c, 1);
    if (c > 1)
      throw boost::archive::archive_exception(
        boost::archive::archive_exception::input_stream_error, "bad bool");
    t = c == 1;
  }

  template <class T>
  void load_override(T& t) {
    base::load_override(t);
  }

  /// Element counts of every collection pass through here.
  void load_override(boost::serialization::collection_size_type& t) {
    base::load_override(t);
    check(static_cast<std::size_t>(t));
  }

 private:
  void check(std::size_t n) const {
    if (n > sb_->remaining())
      throw boost::archive::archive_exception(
        boost::archive::archive_exception::input_stream_error,
        "count exceeds the remaining input");
  }

  bounded_streambuf* sb_;
};

} // namespace dice

BOOST_SERIALIZATION_REGISTER_ARCHIVE(dice::bounded_iarchive)
BOOST_SERIALIZATION_USE_ARRAY_OPTIMIZATION(dice::bounded_iarchive)

namespace dice {

/// Doubles the capacity of `t`, telling `ar` where each item moved (as
/// Boost's loaders do when they move an item into place).
template <class U, class Alloc>
void grow(bounded_iarchive& ar, std::vector<U, Alloc>& t) {
  std::vector<U, Alloc> bigger;
  bigger.reserve(std::max<std::size_t>(2 * t.capacity(), 1));
  for (auto& x : t) {
    bigger.push_back(std::move(x));
    ar.reset_object_address(&bigger.back(), &x);
  }
  t.swap(bigger);
}

// Boost's vector loader dispatches on array optimization to load(ar, t,
// version, mpl::true_ / mpl::false_), found by ADL; these overloads for a
// bounded archive are more specialized than Boost's. (Overloading the
// three-argument load instead would be ambiguous with a user's own
// overload for a vector of one element type.)

/// Raw elements (Boost reads them with one load_binary): exactly count x
/// sizeof(U) bytes must follow before anything is resized.
template <class U, class Alloc>
void load(bounded_iarchive& ar, std::vector<U, Alloc>& t,
          const unsigned int /*version*/, boost::mpl::true_) {
  namespace bs = boost::serialization;
  bs::collection_size_type count;
  ar >> BOOST_SERIALIZATION_NVP(count);
  unsigned int item_version = 0;
  if (BOOST_SERIALIZATION_VECTOR_VERSIONED(ar.get_library_version()))
    ar >> BOOST_SERIALIZATION_NVP(item_version);
  ar.require(count, sizeof(U));
  t.resize(count);
  if (!t.empty())
    ar >> bs::make_array<U, bs::collection_size_type>(t.data(), count);
}

/// Other elements: Boost reserves (and default-constructs) all `count` items
/// before it decodes one. Here only what the bytes left can back is
/// reserved; past that the vector grows as items really decode, so a
/// hostile count costs at most `max_expansion` bytes of memory per byte of
/// input.
template <class U, class Alloc>
void load(bounded_iarchive& ar, std::vector<U, Alloc>& t,
          const unsigned int /*version*/, boost::mpl::false_) {
  namespace bs = boost::serialization;
  bs::collection_size_type count;
  ar >> BOOST_SERIALIZATION_NVP(count);
  bs::item_version_type item_version(0);
  if (bs::library_version_type(3) < ar.get_library_version())
    ar >> BOOST_SERIALIZATION_NVP(item_version);
  t.clear();
  auto backed = ar.remaining() * bounded_iarchive::max_expansion
    / std::max<std::size_t>(sizeof(U), 1);
  t.reserve(static_cast<std::size_t>(
    std::min<std::uint64_t>(count, std::max<std::size_t>(backed, 1))));
  for (std::uint64_t i = 0; i < count; ++i) {
    if (t.size() == t.capacity())
      grow(ar, t);
    bs::detail::stack_construct<bounded_iarchive, U> u(ar, item_version);
    ar >> bs::make_nvp("item", u.reference());
    t.push_back(std::move(u.reference()));
    // Boost may track the item's address (pointers to it later in the
    // archive): tell it where the item lives now.
    ar.reset_object_address(&t.back(), u.address());
  }
}

/// Boost's `std::vector<bool>` format (a count, then one byte per bool), with
/// the count checked in bytes first.
template <class Alloc>
void load(bounded_iarchive& ar, std::vector<bool, Alloc>& t,
          const unsigned int /*version*/) {
  namespace bs = boost::serialization;
  bs::collection_size_type count;
  ar >> BOOST_SERIALIZATION_NVP(count);
  ar.require(count, 1);
  t.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    bool b = false;
    ar >> boost::serialization::make_nvp("item", b);
    t[i] = b;
  }
}

} // namespace dice
