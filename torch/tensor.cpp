#include "dice/torch/tensor.hpp"

#include "dice/core/errc.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/shared_bytes.hpp"
#include "dice/torch/model.hpp"
#include "dice/torch/transition.hpp"

#include <ATen/ATen.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace dice::detail {

at::Tensor prepare_save(const at::Tensor& x, tensor_header& hdr) {
  if (!x.defined()) {
    hdr.code = undefined_tensor_code;
    hdr.shape.clear();
    hdr.nbytes = 0;
    return {};
  }
  auto type = from_torch(x.scalar_type());
  if (!type)
    throw std::invalid_argument("dice: cannot serialize tensor: "
                                + render(type.error()));
  // One copy at most: detach drops autograd, to(kCPU) and contiguous() are
  // no-ops for a tensor that already is a dense CPU tensor.
  auto src = x.detach().to(at::kCPU).contiguous();
  hdr.code = static_cast<std::uint8_t>(*type);
  auto sizes = src.sizes();
  hdr.shape.assign(sizes.begin(), sizes.end());
  hdr.nbytes = src.nbytes();
  return src;
}

at::Tensor allocate_for_load(const tensor_header& hdr) {
  auto fail = [](const std::string& why) {
    return std::invalid_argument("dice: tensor archive " + why);
  };
  if (hdr.code == undefined_tensor_code) {
    if (!hdr.shape.empty() || hdr.nbytes != 0)
      throw fail("has an undefined tensor with a shape or bytes");
    return {};
  }
  auto type = static_cast<dtype>(hdr.code);
  auto esize = element_size(type);
  if (esize == 0)
    throw fail("has an unknown dtype (" + std::to_string(hdr.code) + ")");
  if (hdr.shape.size() > max_tensor_dims)
    throw fail("has " + std::to_string(hdr.shape.size()) + " dimensions");
  if (hdr.nbytes > max_wire_bytes)
    throw fail("claims " + std::to_string(hdr.nbytes) + " bytes (limit "
               + std::to_string(max_wire_bytes) + ")");
  bool has_zero = false;
  for (auto d : hdr.shape) {
    if (d < 0)
      throw fail("has a negative dimension (" + std::to_string(d) + ")");
    has_zero = has_zero || d == 0;
  }
  // Multiply with an overflow check, bounded by the byte limit, so that a
  // hostile shape can neither wrap around nor ask for absurd memory.
  const std::uint64_t max_elems = max_wire_bytes / esize;
  std::uint64_t elems = has_zero ? 0 : 1;
  if (!has_zero) {
    for (auto d : hdr.shape) {
      auto ud = static_cast<std::uint64_t>(d);
      if (elems > max_elems / ud)
        throw fail("has a shape larger than the limit");
      elems *= ud;
    }
  }
  if (elems * esize != hdr.nbytes)
    throw fail("claims " + std::to_string(hdr.nbytes)
               + " bytes, its shape and dtype need "
               + std::to_string(elems * esize));
  return at::empty(hdr.shape, at::TensorOptions().dtype(to_torch(type)));
}

} // namespace dice::detail

namespace dice {

at::Tensor& transition::at(const std::string& name) {
  auto i = tensors.find(name);
  if (i == tensors.end())
    throw std::out_of_range("dice::transition has no tensor '" + name + "'");
  return i->second;
}

const at::Tensor& transition::at(const std::string& name) const {
  auto i = tensors.find(name);
  if (i == tensors.end())
    throw std::out_of_range("dice::transition has no tensor '" + name + "'");
  return i->second;
}

bool equal(const transition& x, const transition& y) {
  if (x.tensors.size() != y.tensors.size())
    return false;
  auto i = y.tensors.begin();
  for (auto& [name, tensor] : x.tensors) {
    auto& [other_name, other] = *i++;
    if (name != other_name || tensor.defined() != other.defined())
      return false;
    if (!tensor.defined())
      continue;
    // at::equal ignores the dtype when values compare equal: check it first.
    if (tensor.scalar_type() != other.scalar_type()
        || tensor.sizes() != other.sizes() || !at::equal(tensor, other))
      return false;
  }
  return true;
}

} // namespace dice
