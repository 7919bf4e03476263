#include "group.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <algorithm>
#include <cmath>

namespace dqn {

void group_trainer::attach(dqn_learner& learner) {
  auto* self = this;
  member->progress = [&learner] {
    return learner.updates();
  };
  member->sync_state = [self, &learner](dice::learner_group& g, int root,
                                        dice::context& ctx) -> caf::error {
    if (auto err = g.broadcast_parameters(*learner.online(), root))
      return err;
    if (auto err = g.broadcast_parameters(*learner.target(), root))
      return err;
    if (auto err = g.broadcast_optimizer(learner.optimizer(), root))
      return err;
    std::vector<double> xs{0, 0, 0, 0};
    if (g.rank() == root)
      xs = {static_cast<double>(ctx.train_iter), self->owed,
            static_cast<double>(learner.updates()),
            static_cast<double>(self->iterations)};
    if (auto err = g.all_reduce_sum(xs))
      return err;
    ctx.train_iter = static_cast<std::int64_t>(xs[0]);
    self->owed = xs[1];
    learner.set_updates(static_cast<std::int64_t>(xs[2]));
    self->iterations = static_cast<std::int64_t>(xs[3]);
    return {};
  };
}

group_trainer::result group_trainer::iterate(dice::context& ctx,
                                             dqn_learner& learner,
                                             const run_options& opts,
                                             std::size_t fresh, bool stop) {
  result res;
  auto size = std::max(member->size(), 1);
  // Each rank samples its own share: ready once it holds its part of
  // learning_starts and at least a batch.
  auto need = std::max<std::size_t>(
    opts.algo.learning_starts / static_cast<std::size_t>(size),
    static_cast<std::size_t>(opts.algo.batch_size));
  std::vector<double> extra{static_cast<double>(fresh),
                            learner.buffer().size() >= need ? 0.0 : 1.0};
  auto decided = member->sync(ctx, extra, stop);
  if (!decided)
    return res;
  res.stop = *decided;
  ++iterations;
  if (extra[1] > 0)
    return res;
  // The group consumes `size` batches per step: as many samples per new
  // transition as one learner with updates_per_step.
  owed += extra[0] * opts.algo.updates_per_step / size;
  // The sync admitted a restarted learner: the steps owed are taken in the
  // larger generation (its root hands `owed` on).
  auto* g = member->group();
  if (g == nullptr)
    return res;
  auto n = static_cast<std::int64_t>(owed);
  owed -= static_cast<double>(n);
  for (std::int64_t i = 0; i < n && g != nullptr; ++i) {
    bool ok = true;
    auto loss = learner.update([&](torch::nn::Module& m) {
      if (auto err = g->all_reduce_gradients(m)) {
        member->fail(err);
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
  if (opts.verify_every > 0 && iterations % opts.verify_every == 0
      && (g = member->group()) != nullptr) {
    auto digest = dice::parameters_digest(*learner.online());
    if (digest && digests)
      digests << member->generation() << ' ' << ctx.train_iter << ' '
              << learner.updates() << ' ' << std::hex << *digest << std::dec
              << '\n'
              << std::flush;
    if (auto err = g->verify_identical(*learner.online())) {
      dice::log::error(
        0, "learner group: parameters differ: " + dice::render(err));
      member->fail(err);
    }
  }
  return res;
}

} // namespace dqn
