#include "dice/torch/model.hpp"

#include "dice/core/errc.hpp"
#include "dice/torch/checkpoint.hpp"

#include <torch/torch.h>

#include <cstring>
#include <map>

namespace dice {

namespace {

// The state_dict: parameters then buffers, with dotted names.
std::vector<std::pair<std::string, at::Tensor>>
state_dict(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> result;
  for (auto& kvp : m.named_parameters(true))
    result.emplace_back(kvp.key(), kvp.value());
  for (auto& kvp : m.named_buffers(true))
    result.emplace_back(kvp.key(), kvp.value());
  return result;
}

std::string shape_str(c10::IntArrayRef xs) {
  std::string result = "[";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0)
      result += ", ";
    result += std::to_string(xs[i]);
  }
  return result + "]";
}

} // namespace

caf::expected<dtype> from_torch(c10::ScalarType x) {
  switch (x) {
    case c10::ScalarType::Float: return dtype::float32;
    case c10::ScalarType::Double: return dtype::float64;
    case c10::ScalarType::Half: return dtype::float16;
    case c10::ScalarType::BFloat16: return dtype::bfloat16;
    case c10::ScalarType::Long: return dtype::int64;
    case c10::ScalarType::Int: return dtype::int32;
    case c10::ScalarType::Short: return dtype::int16;
    case c10::ScalarType::Char: return dtype::int8;
    case c10::ScalarType::Byte: return dtype::uint8;
    case c10::ScalarType::Bool: return dtype::boolean;
    default:
      return make_error(errc::model_mismatch,
                        std::string{"unsupported tensor dtype "}
                          + c10::toString(x));
  }
}

c10::ScalarType to_torch(dtype x) {
  switch (x) {
    case dtype::float32: return c10::ScalarType::Float;
    case dtype::float64: return c10::ScalarType::Double;
    case dtype::float16: return c10::ScalarType::Half;
    case dtype::bfloat16: return c10::ScalarType::BFloat16;
    case dtype::int64: return c10::ScalarType::Long;
    case dtype::int32: return c10::ScalarType::Int;
    case dtype::int16: return c10::ScalarType::Short;
    case dtype::int8: return c10::ScalarType::Char;
    case dtype::uint8: return c10::ScalarType::Byte;
    case dtype::boolean: return c10::ScalarType::Bool;
  }
  return c10::ScalarType::Undefined;
}

caf::expected<model_snapshot> to_snapshot(const torch::nn::Module& m) {
  try {
    auto sd = state_dict(m);
    std::vector<at::Tensor> cpu;
    cpu.reserve(sd.size());
    std::size_t total = 0;
    for (auto& [name, t] : sd) {
      cpu.push_back(t.detach().to(torch::kCPU).contiguous());
      total += snapshot_builder::padded(cpu.back().nbytes());
    }
    snapshot_builder builder{total};
    for (size_t i = 0; i < sd.size(); ++i) {
      auto type = from_torch(cpu[i].scalar_type());
      if (!type)
        return make_error(errc::model_mismatch,
                          "tensor '" + sd[i].first
                            + "': " + render(type.error()));
      auto sizes = cpu[i].sizes();
      builder.add(sd[i].first, *type, {sizes.begin(), sizes.end()},
                  cpu[i].data_ptr(), cpu[i].nbytes());
    }
    return builder.build(0, 0, 0, 0);
  } catch (const std::exception& e) {
    return make_error(errc::user_exception,
                      std::string{"snapshot failed: "} + e.what());
  }
}

caf::error load_snapshot(torch::nn::Module& m, const model_snapshot& x) {
  if (auto err = validate(x))
    return err;
  auto sd = state_dict(m);
  std::map<std::string, at::Tensor*> dst;
  for (auto& [name, t] : sd)
    dst.emplace(name, &t);
  auto mismatch = [](std::string what) {
    return make_error(errc::model_mismatch, std::move(what));
  };
  // Check everything before writing anything: a bad snapshot must leave the
  // model untouched.
  if (x.index.size() != dst.size()) {
    for (auto& e : x.index)
      if (dst.count(e.name) == 0)
        return mismatch("snapshot has tensor '" + e.name
                        + "' the model does not have");
    return mismatch("snapshot has " + std::to_string(x.index.size())
                    + " tensors, the model " + std::to_string(dst.size()));
  }
  for (auto& e : x.index) {
    auto i = dst.find(e.name);
    if (i == dst.end())
      return mismatch("snapshot has tensor '" + e.name
                      + "' the model does not have");
    auto& t = *i->second;
    if (to_torch(e.type) != t.scalar_type())
      return mismatch("tensor '" + e.name + "' is " + to_string(e.type)
                      + " in the snapshot, " + c10::toString(t.scalar_type())
                      + " in the model");
    if (c10::IntArrayRef{e.shape} != t.sizes())
      return mismatch("tensor '" + e.name + "' has shape " + shape_str(e.shape)
                      + " in the snapshot, " + shape_str(t.sizes())
                      + " in the model");
  }
  try {
    torch::NoGradGuard no_grad;
    for (auto& e : x.index) {
      auto& t = *dst[e.name];
      auto src = const_cast<std::uint8_t*>(x.data.data() + e.offset);
      if (t.is_contiguous() && t.device().is_cpu()) {
        if (e.nbytes > 0)
          std::memcpy(t.data_ptr(), src, e.nbytes);
        // As copy_ would: a backward that saved this tensor before the
        // load then fails loudly instead of using the new values.
        t.unsafeGetTensorImpl()->bump_version();
      } else {
        auto view = torch::from_blob(
          src, e.shape, torch::TensorOptions().dtype(to_torch(e.type)));
        t.copy_(view);
      }
    }
  } catch (const std::exception& e) {
    return make_error(errc::user_exception,
                      std::string{"load failed: "} + e.what());
  }
  return caf::none;
}

torch_model::torch_model(std::shared_ptr<torch::nn::Module> module)
  : module_(std::move(module)) {
  // nop
}

caf::expected<model_snapshot> torch_model::snapshot() {
  std::lock_guard<std::mutex> guard{mtx_};
  return to_snapshot(*module_);
}

caf::error torch_model::load(const model_snapshot& x) {
  std::lock_guard<std::mutex> guard{mtx_};
  return load_snapshot(*module_, x);
}

std::shared_ptr<torch_model>
model_port_of(std::shared_ptr<torch::nn::Module> module) {
  return std::make_shared<torch_model>(std::move(module));
}

caf::error save_module(const torch::nn::Module& m, const std::string& path) {
  auto snap = to_snapshot(m);
  if (!snap)
    return snap.error();
  return save_pytorch_checkpoint(*snap, path);
}

caf::error load_module(torch::nn::Module& m, const std::string& path) {
  auto snap = load_pytorch_checkpoint(path);
  if (!snap)
    return snap.error();
  return load_snapshot(m, *snap);
}

} // namespace dice
