// The collectives of a learner group: gradient averaging (bucketed or
// flat), broadcasts, gathers, and the parameter digest.

#include "dice/torch/learner_group.hpp"

#include "learner_group_impl.hpp"
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/torch.h>

// Header-only XXH3 (libxxhash-dev): nothing extra to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <limits>
#include <sstream>

namespace dice {

namespace {

std::uint64_t hash_combine(std::uint64_t seed, const void* p, std::size_t n) {
  return XXH3_64bits_withSeed(p, n, seed);
}

} // namespace

namespace detail {

// Trainable parameters whose gradients take part, undefined ones as zeros.
std::vector<at::Tensor> gradients(torch::nn::Module& m) {
  std::vector<at::Tensor> result;
  for (auto& p : m.parameters(true)) {
    if (!p.requires_grad())
      continue;
    auto& g = p.mutable_grad();
    if (!g.defined())
      g = torch::zeros_like(p);
    result.push_back(g);
  }
  return result;
}

// The layout all ranks must share: dtype and element count of each tensor.
std::int64_t layout_signature(const std::vector<at::Tensor>& xs) {
  std::uint64_t h = 0x6c6561726e657273; // "learners"
  for (auto& x : xs) {
    std::int64_t item[2] = {static_cast<std::int64_t>(x.scalar_type()),
                            x.numel()};
    h = hash_combine(h, item, sizeof(item));
  }
  return static_cast<std::int64_t>(h);
}

std::vector<bucket> make_buckets(const std::vector<at::Tensor>& xs,
                                 std::size_t limit) {
  std::vector<bucket> result;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto bytes = static_cast<std::size_t>(xs[i].numel()) * xs[i].element_size();
    if (!result.empty()) {
      auto& b = result.back();
      auto& first = xs[b.first];
      auto used = static_cast<std::size_t>(b.numel) * first.element_size();
      if (first.scalar_type() == xs[i].scalar_type() && used + bytes <= limit) {
        b.last = i + 1;
        b.numel += xs[i].numel();
        continue;
      }
    }
    result.push_back(bucket{i, i + 1, xs[i].numel()});
  }
  return result;
}

} // namespace detail

using detail::bucket;
using detail::gradients;
using detail::layout_signature;
using detail::make_buckets;

caf::error learner_group::all_reduce_gradients(torch::nn::Module& m) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (d.cfg.size == 1)
    return caf::none;
  std::vector<at::Tensor> grads;
  try {
    torch::NoGradGuard no_grad;
    grads = gradients(m);
    for (auto& g : grads)
      if (!g.device().is_cpu())
        return make_error(errc::model_mismatch,
                          d.where() + ": gradients must be on the CPU");
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch, d.where() + ": " + e.what());
  }
  auto layout = layout_signature(grads);
  bool changed = !d.layout_checked || d.checked_layout != layout;
  if (changed) {
    auto all = all_gather(layout);
    if (!all)
      return all.error();
    for (int r = 0; r < d.cfg.size; ++r)
      if ((*all)[r] != layout)
        return d.fail(make_error(errc::model_mismatch,
                                 d.where() + ": rank " + std::to_string(r)
                                   + " has another parameter layout"));
    d.layout_checked = true;
    d.checked_layout = layout;
    d.buffers.clear();
  }
  auto mode = d.cfg.mode;
  if (mode == reduce_mode::automatic) {
    std::size_t bytes = 0;
    for (auto& g : grads)
      bytes += static_cast<std::size_t>(g.numel()) * g.element_size();
    // At L = 2 the exchange moves what the ring moves, with one message
    // latency instead of two and no hand-off to Gloo's threads: it was
    // faster at 18 KB and at 6.8 MB (docs/learner_group.md).
    mode = d.cfg.size == 2 || bytes <= d.cfg.bucket_bytes
      ? reduce_mode::exchange
      : reduce_mode::bucketed;
  }
  if (mode == reduce_mode::exchange)
    return d.exchange(grads, changed);
  auto limit = mode == reduce_mode::flat
    ? std::numeric_limits<std::size_t>::max()
    : d.cfg.bucket_bytes;
  auto buckets = make_buckets(grads, limit);
  if (d.buffers.size() != buckets.size())
    d.buffers.assign(buckets.size(), at::Tensor{});
  auto size = d.cfg.size;
  torch::NoGradGuard no_grad;
  // A bucket of one contiguous gradient is reduced in place; others are
  // copied into a flat buffer (kept between steps) and back.
  auto in_place = [&](const bucket& b) {
    return b.last - b.first == 1 && grads[b.first].is_contiguous();
  };
  auto launch = [&](std::size_t i) {
    auto& b = buckets[i];
    std::vector<at::Tensor> ts;
    if (in_place(b)) {
      ts.push_back(grads[b.first]);
    } else {
      auto& buf = d.buffers[i];
      if (!buf.defined() || buf.numel() != b.numel
          || buf.scalar_type() != grads[b.first].scalar_type())
        buf = torch::empty({b.numel}, grads[b.first].options());
      std::int64_t off = 0;
      for (auto k = b.first; k < b.last; ++k) {
        auto n = grads[k].numel();
        buf.narrow(0, off, n).view_as(grads[k]).copy_(grads[k]);
        off += n;
      }
      ts.push_back(buf);
    }
    return (*pg)->allreduce(ts);
  };
  if (auto err = d.run_works(buckets.size(), launch, "all-reduce"))
    return err;
  try {
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      auto& b = buckets[i];
      if (in_place(b)) {
        grads[b.first].div_(size);
        continue;
      }
      auto& buf = d.buffers[i];
      buf.div_(size);
      std::int64_t off = 0;
      for (auto k = b.first; k < b.last; ++k) {
        auto n = grads[k].numel();
        grads[k].copy_(buf.narrow(0, off, n).view_as(grads[k]));
        off += n;
      }
    }
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch, d.where() + ": " + e.what());
  }
  return caf::none;
}

caf::error learner_group::broadcast_parameters(torch::nn::Module& m, int root) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (root < 0 || root >= d.cfg.size)
    return make_error(errc::invalid_config,
                      d.where() + ": no rank " + std::to_string(root));
  if (d.cfg.size == 1)
    return caf::none;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> xs;
  for (auto& p : m.parameters(true))
    xs.push_back(p);
  for (auto& b : m.buffers(true))
    xs.push_back(b);
  for (auto& x : xs)
    if (!x.device().is_cpu())
      return make_error(errc::model_mismatch,
                        d.where() + ": parameters must be on the CPU");
  // One flat buffer per run of one dtype: a handful of broadcasts, not one
  // per tensor.
  auto buckets = make_buckets(xs, std::numeric_limits<std::size_t>::max());
  std::vector<at::Tensor> flats(buckets.size());
  auto launch = [&](std::size_t i) {
    auto& b = buckets[i];
    std::vector<at::Tensor> parts;
    for (auto k = b.first; k < b.last; ++k)
      parts.push_back(xs[k].reshape({-1}));
    flats[i] = torch::cat(parts);
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    std::vector<at::Tensor> ts{flats[i]};
    return (*pg)->broadcast(ts, opts);
  };
  if (auto err = d.run_works(buckets.size(), launch, "broadcast"))
    return err;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    std::int64_t off = 0;
    for (auto k = buckets[i].first; k < buckets[i].last; ++k) {
      auto n = xs[k].numel();
      xs[k].copy_(flats[i].narrow(0, off, n).view_as(xs[k]));
      off += n;
    }
  }
  return caf::none;
}

caf::error learner_group::broadcast_optimizer(torch::optim::Optimizer& opt,
                                              int root) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (root < 0 || root >= d.cfg.size)
    return make_error(errc::invalid_config,
                      d.where() + ": no rank " + std::to_string(root));
  if (d.cfg.size == 1)
    return caf::none;
  std::string bytes;
  if (d.cfg.rank == root) {
    try {
      torch::serialize::OutputArchive archive;
      opt.save(archive);
      std::ostringstream out;
      archive.save_to(out);
      bytes = out.str();
    } catch (const std::exception& e) {
      return make_error(errc::user_exception,
                        d.where() + ": saving the optimizer: " + e.what());
    }
  }
  auto len = torch::full({1}, static_cast<std::int64_t>(bytes.size()),
                         torch::kInt64);
  at::Tensor data;
  auto launch = [&](std::size_t i) {
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    std::vector<at::Tensor> ts;
    if (i == 0) {
      ts.push_back(len);
    } else {
      data = torch::empty({len.item<std::int64_t>()}, torch::kUInt8);
      if (d.cfg.rank == root)
        std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
      ts.push_back(data);
    }
    return (*pg)->broadcast(ts, opts);
  };
  // Two steps: the length must arrive before the buffer is sized.
  if (auto err = d.run_works(1, launch, "optimizer broadcast"))
    return err;
  if (auto err = d.run_works(
        1,
        [&](std::size_t) {
          return launch(1);
        },
        "optimizer broadcast"))
    return err;
  if (d.cfg.rank == root)
    return caf::none;
  try {
    std::istringstream in{
      std::string{reinterpret_cast<const char*>(data.data_ptr()),
                  static_cast<std::size_t>(data.numel())}};
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    opt.load(archive);
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch,
                      d.where() + ": loading the optimizer: " + e.what());
  }
  return caf::none;
}

caf::error learner_group::all_reduce_sum(std::vector<double>& xs) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (d.cfg.size == 1 || xs.empty())
    return caf::none;
  auto t = torch::from_blob(xs.data(), {static_cast<std::int64_t>(xs.size())},
                            torch::kFloat64);
  auto launch = [&](std::size_t) {
    std::vector<at::Tensor> ts{t};
    return (*pg)->allreduce(ts);
  };
  return d.run_works(1, launch, "sum");
}

caf::expected<std::vector<std::int64_t>>
learner_group::all_gather(std::int64_t x) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (d.cfg.size == 1)
    return std::vector<std::int64_t>{x};
  std::vector<at::Tensor> in{torch::full({1}, x, torch::kInt64)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < d.cfg.size; ++r)
    out[0].push_back(torch::empty({1}, torch::kInt64));
  auto launch = [&](std::size_t) {
    return (*pg)->allgather(out, in);
  };
  if (auto err = d.run_works(1, launch, "all-gather"))
    return err;
  std::vector<std::int64_t> result;
  for (auto& t : out[0])
    result.push_back(t.item<std::int64_t>());
  return result;
}

caf::error learner_group::verify_identical(const torch::nn::Module& m) {
  auto digest = parameters_digest(m);
  if (!digest)
    return digest.error();
  auto all = all_gather(static_cast<std::int64_t>(*digest));
  if (!all)
    return all.error();
  std::string differ;
  for (std::size_t r = 1; r < all->size(); ++r)
    if ((*all)[r] != (*all)[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (differ.empty())
    return caf::none;
  return make_error(errc::model_mismatch,
                    impl_->where() + ": parameters of rank(s) " + differ
                      + " differ from rank 0");
}

caf::expected<std::uint64_t> parameters_digest(const torch::nn::Module& m) {
  try {
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    auto add = [&](const std::string& name, const at::Tensor& t) {
      auto x = t.device().is_cpu() ? t.contiguous() : t.cpu().contiguous();
      XXH3_64bits_update(&state, name.data(), name.size() + 1);
      auto type = static_cast<std::int64_t>(x.scalar_type());
      XXH3_64bits_update(&state, &type, sizeof(type));
      auto dims = x.sizes();
      XXH3_64bits_update(&state, dims.data(), dims.size() * sizeof(dims[0]));
      XXH3_64bits_update(&state, x.data_ptr(), x.numel() * x.element_size());
    };
    for (auto& kv : m.named_parameters(true))
      add(kv.key(), kv.value());
    for (auto& kv : m.named_buffers(true))
      add(kv.key(), kv.value());
    return XXH3_64bits_digest(&state);
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch,
                      std::string{"parameters_digest: "} + e.what());
  }
}

} // namespace dice
