#pragma once

// A ready-made item type for dice::payload: named tensors, like DI-engine's
// transition dicts ({obs, action, reward, next_obs, done, ...}). Tensors may
// hold one transition or a batch (e.g. obs of shape [B, 4]).
//
//   dice::transition t;
//   t.set("obs", obs).set("action", action).set("reward", reward);
//   auto p = dice::pack(std::vector<dice::transition>{t});
//   auto back = dice::unpack<dice::transition>(p);

#include "dice/torch/tensor.hpp"

#include <ATen/core/Tensor.h>
#include <boost/serialization/split_free.hpp>
#include <boost/serialization/tracking.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace dice {

/// Named tensors (one transition or a batch of them); Boost-serializable,
/// so `dice::pack` / `dice::unpack<dice::transition>` work on it.
struct transition {
  /// Longest tensor name accepted from the wire.
  static constexpr std::size_t max_name_size = 4096;

  /// The tensors, by name (sorted, unique).
  std::map<std::string, ::at::Tensor> tensors;

  /// The tensor called `name`, inserted undefined when missing (as in
  /// std::map).
  ::at::Tensor& operator[](const std::string& name) {
    return tensors[name];
  }

  /// The tensor called `name`; throws std::out_of_range when missing.
  ::at::Tensor& at(const std::string& name);

  /// The tensor called `name`; throws std::out_of_range when missing.
  const ::at::Tensor& at(const std::string& name) const;

  /// Sets (or replaces) the tensor called `name`; returns `*this` so calls
  /// chain.
  transition& set(std::string name, ::at::Tensor value) {
    tensors[std::move(name)] = std::move(value);
    return *this;
  }

  /// True if a tensor called `name` exists.
  bool contains(const std::string& name) const {
    return tensors.count(name) > 0;
  }

  /// Number of named tensors.
  std::size_t size() const noexcept {
    return tensors.size();
  }

  /// True when no tensor is set.
  bool empty() const noexcept {
    return tensors.empty();
  }
};

/// True when both hold the same names and every pair of tensors has the same
/// dtype, shape and values (an undefined tensor equals only an undefined one).
bool equal(const transition& x, const transition& y);

} // namespace dice

namespace boost::serialization {

/// Writes the number of tensors, then each name (length + bytes) and tensor.
template <class Archive>
void save(Archive& ar, const dice::transition& x,
          const unsigned int /*version*/) {
  std::uint64_t n = x.tensors.size();
  ar << n;
  for (auto& [name, tensor] : x.tensors) {
    std::uint64_t len = name.size();
    ar << len;
    if (len > 0)
      ar.save_binary(name.data(), name.size());
    ar << tensor;
  }
}

/// Reads a transition written by `save`, replacing `x`'s tensors; throws on
/// hostile bytes (over-long or duplicate names, bad tensors, truncation).
template <class Archive>
void load(Archive& ar, dice::transition& x, const unsigned int /*version*/) {
  std::map<std::string, at::Tensor> tensors;
  std::uint64_t n = 0;
  ar >> n;
  // No reserve from `n`: a hostile count just runs into the end of the input.
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t len = 0;
    ar >> len;
    if (len > dice::transition::max_name_size)
      throw std::invalid_argument("dice: transition archive has a "
                                  + std::to_string(len) + "-byte name");
    std::string name(static_cast<std::size_t>(len), '\0');
    if (len > 0)
      ar.load_binary(name.data(), name.size());
    at::Tensor tensor;
    ar >> tensor;
    if (!tensors.emplace(std::move(name), std::move(tensor)).second)
      throw std::invalid_argument("dice: transition archive names a tensor "
                                  "twice");
  }
  x.tensors = std::move(tensors);
}

/// Dispatches to `save` / `load`.
template <class Archive>
void serialize(Archive& ar, dice::transition& x, const unsigned int version) {
  split_free(ar, x, version);
}

} // namespace boost::serialization

// Transitions are values; tracking them would only cost time.
BOOST_CLASS_TRACKING(dice::transition, boost::serialization::track_never)
