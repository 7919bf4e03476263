#pragma once

// Boost.Serialization for LibTorch tensors, so user types that hold tensors
// (dice::transition, or a user's own struct) can travel in a dice::payload.
//
// Wire format (host byte order, like model snapshots): a dtype code (one
// byte, dice::dtype or `undefined_tensor_code`), the number of dimensions,
// each dimension, the byte count, then the raw bytes of a contiguous CPU copy
// written with ONE save_binary call (never element by element).

#include <ATen/core/Tensor.h>
#include <boost/serialization/split_free.hpp>
#include <boost/serialization/tracking.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dice {

/// Most dimensions a tensor read from bytes may have (the same limit
/// `validate(model_snapshot)` applies).
constexpr std::size_t max_tensor_dims = 64;

namespace detail {

/// Dtype code that marks an undefined (default-constructed) tensor.
constexpr std::uint8_t undefined_tensor_code = 0xFF;

/// What precedes a tensor's bytes in an archive.
struct tensor_header {
  /// A dice::dtype value, or `undefined_tensor_code`.
  std::uint8_t code = undefined_tensor_code;
  /// Sizes of each dimension (empty for a 0-dim tensor).
  std::vector<std::int64_t> shape;
  /// Number of raw bytes that follow.
  std::uint64_t nbytes = 0;
};

/// Fills `hdr` for `x` and returns a detached, contiguous CPU tensor holding
/// the bytes to write (`x` itself when it already is one). Throws
/// std::invalid_argument for dtypes dice cannot ship (complex, quantized).
at::Tensor prepare_save(const at::Tensor& x, tensor_header& hdr);

/// Checks a header read from untrusted bytes (known dtype, at most
/// `max_tensor_dims` non-negative dimensions, byte count matching shape and
/// dtype and at most `dice::max_wire_bytes`) and allocates an uninitialized CPU
/// tensor for it. Throws std::invalid_argument on any inconsistency, before
/// allocating anything.
at::Tensor allocate_for_load(const tensor_header& hdr);

/// True for archives that know how many input bytes are left (dice's
/// bounded_iarchive): a tensor's byte count is checked against them before
/// its buffer is allocated.
template <class Archive, class = void>
struct knows_remaining : std::false_type {};

template <class Archive>
struct knows_remaining<
  Archive, std::void_t<decltype(std::declval<const Archive&>().remaining())>>
  : std::true_type {};

} // namespace detail

} // namespace dice

// Boost finds these through `serialize_adl` (its version argument lives in
// boost::serialization); in namespace at or dice they would also be found by
// CAF's ADL-based `serialize` detection (see DESIGN §7).
namespace boost::serialization {

/// Writes a tensor: header, then its bytes in one save_binary call.
template <class Archive>
void save(Archive& ar, const at::Tensor& x, const unsigned int /*version*/) {
  dice::detail::tensor_header hdr;
  auto src = dice::detail::prepare_save(x, hdr);
  std::uint64_t ndim = hdr.shape.size();
  ar << hdr.code << ndim;
  for (auto d : hdr.shape)
    ar << d;
  ar << hdr.nbytes;
  if (hdr.nbytes > 0)
    ar.save_binary(src.data_ptr(), static_cast<std::size_t>(hdr.nbytes));
}

/// Reads a tensor written by `save`; throws on hostile or truncated bytes
/// (std::invalid_argument or boost::archive::archive_exception).
template <class Archive>
void load(Archive& ar, at::Tensor& x, const unsigned int /*version*/) {
  dice::detail::tensor_header hdr;
  std::uint64_t ndim = 0;
  ar >> hdr.code >> ndim;
  // Check before the loop: a hostile count must not make us read or reserve
  // for billions of dimensions.
  if (ndim > dice::max_tensor_dims)
    throw std::invalid_argument("dice: tensor archive claims "
                                + std::to_string(ndim) + " dimensions");
  hdr.shape.resize(static_cast<std::size_t>(ndim));
  for (auto& d : hdr.shape)
    ar >> d;
  ar >> hdr.nbytes;
  // Untrusted input: the bytes must be there before anything is allocated
  // for them (a 30-byte header must not reserve 2 GiB).
  if constexpr (dice::detail::knows_remaining<Archive>::value)
    if (hdr.nbytes > ar.remaining())
      throw std::invalid_argument(
        "dice: tensor archive claims " + std::to_string(hdr.nbytes)
        + " bytes, only " + std::to_string(ar.remaining()) + " are left");
  auto result = dice::detail::allocate_for_load(hdr);
  if (hdr.nbytes > 0)
    ar.load_binary(result.data_ptr(), static_cast<std::size_t>(hdr.nbytes));
  x = std::move(result);
}

/// Dispatches to `save` / `load`.
template <class Archive>
void serialize(Archive& ar, at::Tensor& x, const unsigned int version) {
  split_free(ar, x, version);
}

} // namespace boost::serialization

// Tensors are values: never track their addresses (two temporaries at the
// same address must not turn into a back reference).
BOOST_CLASS_TRACKING(at::Tensor, boost::serialization::track_never)
