// replay_buffer's save and load: torch::serialize archives (what a
// learner's checkpoint holds), one tensor per column under the keys the
// examples used ("replay.obs", ...), so their files still load.

#include "dice/core/errc.hpp"
#include "dice/rl/replay_buffer.hpp"

#include "sum_tree.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>

namespace dice::rl {

namespace {

// A host vector as a tensor that owns a copy (archives keep tensors).
template <class T>
torch::Tensor replay_column(const std::vector<T>& xs, torch::Dtype dtype) {
  return torch::from_blob(const_cast<T*>(xs.data()),
                          {static_cast<std::int64_t>(xs.size())}, dtype)
    .clone();
}

std::int64_t replay_int(torch::serialize::InputArchive& ar,
                        const std::string& key) {
  torch::Tensor t;
  ar.read(key, t);
  return t.item<std::int64_t>();
}

double replay_double(torch::serialize::InputArchive& ar,
                     const std::string& key) {
  torch::Tensor t;
  ar.read(key, t);
  return t.item<double>();
}

// Reads `key` into `xs` (sized already); false when the tensor has another
// length or dtype.
template <class T>
bool replay_read_column(torch::serialize::InputArchive& ar,
                        const std::string& key, torch::Dtype dtype,
                        std::vector<T>& xs) {
  torch::Tensor t;
  ar.read(key, t);
  if (t.scalar_type() != dtype
      || t.numel() != static_cast<std::int64_t>(xs.size()))
    return false;
  t = t.contiguous();
  std::memcpy(xs.data(), t.data_ptr(), xs.size() * sizeof(T));
  return true;
}

bool replay_finite_prefix(const std::vector<float>& xs, std::size_t n) {
  return std::all_of(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n),
                     [](float x) {
                       return std::isfinite(x);
                     });
}

} // namespace

void replay_buffer::save(torch::serialize::OutputArchive& ar) const {
  auto scalar = [](auto x) {
    return torch::tensor(static_cast<std::int64_t>(x));
  };
  ar.write("replay.capacity", scalar(opts_.capacity));
  ar.write("replay.obs_dim", scalar(obs_dim_));
  ar.write("replay.size", scalar(size_));
  ar.write("replay.next", scalar(next_));
  ar.write("replay.obs", replay_column(obs_, torch::kFloat));
  ar.write("replay.next_obs", replay_column(next_obs_, torch::kFloat));
  ar.write("replay.reward", replay_column(reward_, torch::kFloat));
  ar.write("replay.discount", replay_column(discount_, torch::kFloat));
  ar.write("replay.action", replay_column(action_, torch::kLong));
  if (!tree_)
    return;
  std::vector<double> leaves(opts_.capacity);
  for (std::size_t i = 0; i < leaves.size(); ++i)
    leaves[i] = tree_->get(i);
  ar.write("replay.priority", replay_column(leaves, torch::kDouble));
  ar.write("replay.max_priority", torch::tensor(max_priority_, torch::kDouble));
  ar.write("replay.beta", torch::tensor(beta_, torch::kDouble));
  ar.write("replay.samples", scalar(samples_));
}

caf::error replay_buffer::load(torch::serialize::InputArchive& ar) {
  auto bad = [](std::string what) {
    return make_error(errc::malformed_input, "replay state: " + what);
  };
  try {
    auto cap = replay_int(ar, "replay.capacity");
    if (cap != static_cast<std::int64_t>(opts_.capacity))
      return make_error(errc::model_mismatch,
                        "replay state holds " + std::to_string(cap)
                          + " slots, this buffer "
                          + std::to_string(opts_.capacity));
    // The examples' files have no obs_dim: it is obs' length per slot.
    torch::Tensor dim;
    std::int64_t obs_dim = 0;
    if (ar.try_read("replay.obs_dim", dim)) {
      obs_dim = dim.item<std::int64_t>();
    } else {
      torch::Tensor obs;
      ar.read("replay.obs", obs);
      obs_dim = cap > 0 ? obs.numel() / cap : 0;
    }
    if (obs_dim != obs_dim_)
      return make_error(errc::model_mismatch,
                        "replay state has obs_dim " + std::to_string(obs_dim)
                          + ", this buffer " + std::to_string(obs_dim_));
    auto n = replay_int(ar, "replay.size");
    auto at = replay_int(ar, "replay.next");
    if (n < 0 || at < 0 || n > cap || at >= std::max<std::int64_t>(cap, 1))
      return bad("size " + std::to_string(n) + ", position "
                 + std::to_string(at));
    // Into a scratch buffer: a file that does not fit changes nothing.
    replay_buffer tmp{obs_dim_, opts_, 0};
    if (!replay_read_column(ar, "replay.obs", torch::kFloat, tmp.obs_)
        || !replay_read_column(ar, "replay.next_obs", torch::kFloat,
                               tmp.next_obs_)
        || !replay_read_column(ar, "replay.reward", torch::kFloat, tmp.reward_)
        || !replay_read_column(ar, "replay.discount", torch::kFloat,
                               tmp.discount_)
        || !replay_read_column(ar, "replay.action", torch::kLong, tmp.action_))
      return bad("a column does not fit the buffer");
    auto held = static_cast<std::size_t>(n);
    auto d = static_cast<std::size_t>(obs_dim_);
    if (!replay_finite_prefix(tmp.obs_, held * d)
        || !replay_finite_prefix(tmp.next_obs_, held * d)
        || !replay_finite_prefix(tmp.reward_, held)
        || !std::all_of(tmp.discount_.begin(), tmp.discount_.begin() + n,
                        [](float x) {
                          return x >= 0.0f && x <= 1.0f;
                        })
        || !std::all_of(tmp.action_.begin(), tmp.action_.begin() + n,
                        [](std::int64_t a) {
                          return a >= 0;
                        }))
      return bad("non-finite numbers, bad discounts or negative actions");
    tmp.size_ = held;
    tmp.next_ = static_cast<std::size_t>(at);
    if (tmp.tree_) {
      std::vector<double> leaves(opts_.capacity, 1.0);
      torch::Tensor t;
      if (ar.try_read("replay.priority", t)) {
        if (t.scalar_type() != torch::kDouble
            || t.numel() != static_cast<std::int64_t>(leaves.size()))
          return bad("priorities do not fit the buffer");
        t = t.contiguous();
        std::memcpy(leaves.data(), t.data_ptr(),
                    leaves.size() * sizeof(double));
        tmp.max_priority_ = replay_double(ar, "replay.max_priority");
        tmp.beta_ = replay_double(ar, "replay.beta");
        tmp.samples_ = replay_int(ar, "replay.samples");
      }
      // else: a uniform buffer's file; every transition starts at 1.
      for (std::size_t i = 0; i < held; ++i) {
        if (!std::isfinite(leaves[i]) || leaves[i] < 0)
          return bad("priority " + std::to_string(leaves[i]));
        tmp.tree_->set(i, leaves[i]);
      }
      if (!std::isfinite(tmp.max_priority_) || tmp.max_priority_ <= 0
          || !std::isfinite(tmp.beta_) || tmp.samples_ < 0)
        return bad("bad max priority, beta or sample count");
    }
    return restore_from(std::move(tmp));
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

} // namespace dice::rl
