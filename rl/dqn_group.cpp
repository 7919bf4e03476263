// One DQN learner of a data-parallel group: the group agrees on the new
// data and the gradient steps, and averages every step's gradients.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/rl/dqn_agent.hpp"

#include <algorithm>
#include <vector>

namespace dice::rl {

dqn_group::dqn_group(std::shared_ptr<learner_group_member> member,
                     dqn_learner& learner)
  : member_(std::move(member)), learner_(&learner) {
  member_->progress = [this] {
    return learner_->updates();
  };
  member_->sync_state = [this](learner_group& g, int root,
                               context& ctx) -> caf::error {
    auto& l = *learner_;
    if (auto err = g.broadcast_parameters(*l.online(), root))
      return err;
    if (auto err = g.broadcast_parameters(*l.target(), root))
      return err;
    if (auto err = g.broadcast_optimizer(l.optimizer(), root))
      return err;
    std::vector<double> xs{0, 0, 0, 0};
    if (g.rank() == root)
      xs = {static_cast<double>(ctx.train_iter), owed_,
            static_cast<double>(l.updates()), static_cast<double>(iterations_)};
    if (auto err = g.all_reduce_sum(xs))
      return err;
    ctx.train_iter = static_cast<std::int64_t>(xs[0]);
    owed_ = xs[1];
    l.set_updates(static_cast<std::int64_t>(xs[2]));
    iterations_ = static_cast<std::int64_t>(xs[3]);
    return {};
  };
}

void dqn_group::verify(std::int64_t every, const std::string& path) {
  verify_every_ = every;
  if (every > 0)
    digests_.open(path);
}

dqn_group::result dqn_group::iterate(context& ctx, std::size_t fresh,
                                     bool stop) {
  result res;
  auto& opts = learner_->options();
  auto size = std::max(member_->size(), 1);
  // Each rank samples its own share: ready once it holds its part of
  // learning_starts and at least a batch.
  auto need = std::max<std::size_t>(opts.learning_starts
                                      / static_cast<std::size_t>(size),
                                    static_cast<std::size_t>(opts.batch_size));
  std::vector<double> extra{static_cast<double>(fresh),
                            learner_->buffer().size() >= need ? 0.0 : 1.0};
  auto decided = member_->sync(ctx, extra, stop);
  if (!decided)
    return res;
  res.stop = *decided;
  ++iterations_;
  if (extra[1] > 0)
    return res;
  // The group consumes `size` batches per step: as many samples per new
  // transition as one learner with updates_per_step.
  owed_ += extra[0] * opts.updates_per_step / size;
  // The sync admitted a restarted learner: the steps owed are taken in the
  // larger generation (its root hands `owed_` on).
  auto* g = member_->group();
  if (g == nullptr)
    return res;
  auto n = static_cast<std::int64_t>(owed_);
  owed_ -= static_cast<double>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    bool ok = true;
    auto loss = learner_->update([&](torch::nn::Module& m) {
      if (auto err = g->all_reduce_gradients(m)) {
        member_->fail(err);
        ok = false;
      }
      return ok;
    });
    if (!ok)
      break;
    res.loss = loss;
    ++res.steps;
  }
  ctx.train_iter += res.steps;
  if (verify_every_ > 0 && iterations_ % verify_every_ == 0
      && (g = member_->group()) != nullptr) {
    auto digest = parameters_digest(*learner_->online());
    if (digest && digests_)
      digests_ << member_->generation() << ' ' << ctx.train_iter << ' '
               << learner_->updates() << ' ' << std::hex << *digest << std::dec
               << '\n'
               << std::flush;
    if (auto err = g->verify_identical(*learner_->online())) {
      log::error(0, "learner group: parameters differ: " + render(err));
      member_->fail(err);
    }
  }
  return res;
}

bool dqn_group::finish(context& ctx) {
  // What arrived after the last iteration (the context exchanger merged it
  // just before on_stop), then leave: peers stop waiting.
  bool ok = true;
  std::vector<double> extra{0, 1};
  if (member_->group() != nullptr)
    ok = static_cast<bool>(member_->sync(ctx, extra, true));
  member_->leave();
  return ok;
}

} // namespace dice::rl
