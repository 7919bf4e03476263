#pragma once

// A Boost binary input archive for untrusted bytes. Boost's own loaders size
// containers from counts read off the input (`vector::resize(count)`,
// `string::resize(len)`) before reading a single element, so a few hostile
// bytes can make them allocate and zero gigabytes. This archive reads the
// same format as `boost::archive::binary_iarchive` (what `dice::pack`
// writes) but refuses any count or length larger than the bytes left, so
// the memory a decode can take is proportional to its input.

#include <boost/archive/archive_exception.hpp>
#include <boost/archive/basic_binary_iarchive.hpp>
#include <boost/archive/basic_binary_iprimitive.hpp>
#include <boost/archive/binary_iarchive_impl.hpp>
#include <boost/archive/detail/register_archive.hpp>
#include <boost/serialization/collection_size_type.hpp>

#include <cstddef>
#include <streambuf>
#include <string>

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
  /// Reads an archive (with Boost's header unless `flags` says no_header).
  explicit bounded_iarchive(bounded_streambuf& sb, unsigned int flags = 0)
    : base(sb, flags), sb_(&sb) {
    init(flags);
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
