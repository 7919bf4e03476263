// dqn_learner: gradient steps and its checkpoint state.

#include "dice/core/errc.hpp"
#include "dice/rl/dqn.hpp"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>

namespace dice::rl {

dqn_learner::dqn_learner(q_network online, dqn_options opts, std::uint64_t seed)
  : opts_(std::move(opts)), online_(std::move(online)),
    target_(online_->obs_dim(), online_->num_actions(), online_->hidden()),
    opt_(online_->parameters(), torch::optim::AdamOptions(opts_.lr)),
    buffer_(online_->obs_dim(), opts_.replay, seed) {
  hard_update(*target_, *online_);
  target_->eval();
}

caf::error dqn_learner::add(const transition_batch& xs) {
  auto actions = online_->num_actions();
  for (auto a : xs.action)
    if (a < 0 || a >= actions)
      return make_error(errc::malformed_input,
                        "dqn_learner: action " + std::to_string(a)
                          + " of a network with " + std::to_string(actions));
  return buffer_.add(xs);
}

float dqn_learner::update(const gradient_hook& reduce) {
  return update_on(buffer_.sample(opts_.batch_size), reduce);
}

float dqn_learner::update_on(const sample_batch& b,
                             const gradient_hook& reduce) {
  if (b.action.numel() == 0)
    return std::numeric_limits<float>::quiet_NaN();
  torch::Tensor target;
  {
    torch::NoGradGuard no_grad;
    auto next_q_target = target_->forward(b.next_obs);
    auto next_q_online = opts_.double_dqn ? online_->forward(b.next_obs)
                                          : torch::Tensor{};
    target = td_target(b.reward, b.discount, next_q_target, next_q_online);
  }
  auto q = online_->forward(b.obs).gather(1, b.action.unsqueeze(1)).squeeze(1);
  torch::Tensor loss;
  if (buffer_.prioritized() && b.weights.defined()) {
    // Importance weights undo the bias of drawing by priority.
    auto each = torch::smooth_l1_loss(q, target, torch::Reduction::None);
    loss = (each * b.weights).mean();
    if (!b.indices.empty()) {
      auto td = (target - q.detach()).abs().contiguous();
      auto* p = td.data_ptr<float>();
      // A diverged (non-finite) step is refused and keeps the old
      // priorities; the NaN loss tells the caller.
      (void)buffer_.update_priorities(b.indices, {p, p + td.numel()});
    }
  } else {
    // Unweighted: the examples' loss, bit for bit.
    loss = torch::smooth_l1_loss(q, target);
  }
  opt_.zero_grad();
  loss.backward();
  // Averaged first, then clipped: every rank clips the same gradient.
  if (reduce && !reduce(*online_))
    return std::numeric_limits<float>::quiet_NaN();
  if (opts_.grad_clip > 0)
    torch::nn::utils::clip_grad_norm_(online_->parameters(), opts_.grad_clip);
  opt_.step();
  ++updates_;
  if (opts_.target_update_every > 0) {
    if (updates_ % opts_.target_update_every == 0)
      hard_update(*target_, *online_);
  } else {
    soft_update(*target_, *online_, opts_.tau);
  }
  return loss.item<float>();
}

// -- checkpoints --------------------------------------------------------------

caf::error dqn_learner::save_state(const std::string& path) {
  auto tmp = path + ".tmp";
  try {
    torch::serialize::OutputArchive ar;
    torch::serialize::OutputArchive target;
    target_->save(target);
    ar.write("target", target);
    torch::serialize::OutputArchive adam;
    opt_.save(adam);
    ar.write("adam", adam);
    ar.write("updates", torch::tensor(updates_));
    buffer_.save(ar);
    ar.save_to(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    return make_error(errc::storage_failed,
                      "cannot write " + tmp + ": " + e.what());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return make_error(errc::storage_failed,
                      "cannot rename " + tmp + " to " + path);
  return caf::none;
}

namespace {

// True if every parameter of `x` has the name and shape of one of `y`'s.
bool target_shapes_fit(torch::nn::Module& x, torch::nn::Module& y) {
  auto want = y.named_parameters(true);
  auto have = x.named_parameters(true);
  if (have.size() != want.size())
    return false;
  for (auto& kvp : have) {
    auto* dst = want.find(kvp.key());
    if (dst == nullptr || dst->sizes() != kvp.value().sizes())
      return false;
  }
  return true;
}

// True if each moment in `opt`'s state has its parameter's shape.
bool adam_moments_fit(torch::optim::Adam& opt) {
  for (auto& p : opt.parameters()) {
    auto i = opt.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (i == opt.state().end())
      continue; // no step taken yet
    auto& s = static_cast<torch::optim::AdamParamState&>(*i->second);
    if (s.exp_avg().sizes() != p.sizes() || s.exp_avg_sq().sizes() != p.sizes())
      return false;
  }
  return true;
}

} // namespace

caf::error dqn_learner::load_state(const std::string& path) {
  if (!std::filesystem::exists(path))
    return make_error(errc::storage_missing, path + " does not exist");
  auto mismatch = [&](std::string what) {
    return make_error(errc::model_mismatch, path + ": " + what);
  };
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path);
    // Into scratch copies first: a file that does not fit changes nothing.
    // (Module::load replaces tensors wholesale, shapes included, so the
    // shapes are checked after loading.)
    q_network target{online_->obs_dim(), online_->num_actions(),
                     online_->hidden()};
    torch::serialize::InputArchive target_ar;
    ar.read("target", target_ar);
    target->load(target_ar);
    if (!target_shapes_fit(*target, *target_))
      return mismatch("the target network has other layers (widths?)");
    replay_buffer buffer{online_->obs_dim(), opts_.replay, 0};
    if (auto err = buffer.load(ar))
      return err;
    torch::Tensor updates;
    ar.read("updates", updates);
    torch::serialize::InputArchive adam_ar;
    ar.read("adam", adam_ar);
    // Adam's state is keyed by the parameters' addresses: a scratch Adam
    // over the same parameters gives the same keys.
    torch::optim::Adam adam{online_->parameters(),
                            torch::optim::AdamOptions(opts_.lr)};
    adam.load(adam_ar);
    if (!adam_moments_fit(adam))
      return mismatch("Adam's moments do not fit the network");
    // Commit: nothing below reads the file or can fail on its contents.
    hard_update(*target_, *target);
    opt_.state().clear();
    for (auto& kvp : adam.state())
      opt_.state()[kvp.first] = std::move(kvp.second);
    // The sampling RNG keeps this run's seed; only the contents move over.
    if (auto err = buffer_.restore_from(std::move(buffer)))
      return err;
    updates_ = updates.item<std::int64_t>();
    return caf::none;
  } catch (const std::exception& e) {
    return make_error(errc::malformed_input, path + ": " + e.what());
  }
}

} // namespace dice::rl
