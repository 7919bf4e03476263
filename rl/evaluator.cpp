#include "dice/rl/evaluator.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/node_services.hpp"

#include <algorithm>

namespace dice::rl {

caf::expected<std::vector<double>> play_greedy(const vector_env::factory& make,
                                               int episodes, std::uint64_t seed,
                                               const greedy_policy& act) {
  if (episodes < 1)
    return make_error(errc::invalid_config, "episodes must be at least 1");
  auto n = static_cast<std::size_t>(episodes);
  auto envs = vector_env::make(n, make);
  if (!envs)
    return envs.error();
  if (auto err = envs->reset(seed))
    return err;
  auto obs_dim = static_cast<std::int64_t>(envs->obs_dim());
  auto& space = envs->action_space();
  torch::Tensor low, high;
  if (!space.is_discrete()) {
    low = torch::tensor(space.low);
    high = torch::tensor(space.high);
  }
  std::vector<double> returns(n, 0.0);
  std::vector<std::uint8_t> done(n, 0);
  auto left = n;
  torch::NoGradGuard no_grad;
  while (left > 0) {
    auto obs = torch::from_blob(const_cast<float*>(envs->obs().data()),
                                {static_cast<std::int64_t>(n), obs_dim});
    auto actions = act(obs).contiguous();
    caf::error err;
    if (space.is_discrete()) {
      actions = actions.to(torch::kLong).contiguous();
      err = envs->step(actions.data_ptr<std::int64_t>());
    } else {
      actions = torch::max(torch::min(actions.to(torch::kFloat), high), low)
                  .contiguous();
      err = envs->step(actions.data_ptr<float>());
    }
    if (err)
      return err;
    for (std::size_t i = 0; i < n; ++i) {
      if (done[i])
        continue;
      returns[i] += envs->rewards()[i];
      if (envs->terminated()[i] || envs->truncated()[i]) {
        done[i] = 1;
        --left;
      }
    }
  }
  return returns;
}

void finish_at_limits(node_services& svc, std::int64_t env_step,
                      std::int64_t max_env_steps, double seconds,
                      double max_seconds) {
  if (max_env_steps > 0 && env_step >= max_env_steps && !svc.finished())
    svc.request_finish("max_env_steps");
  if (max_seconds > 0 && seconds >= max_seconds && !svc.finished())
    svc.request_finish("max_seconds");
}

namespace {

// Logs one evaluation (info for a new best or a solve, debug otherwise:
// evaluations come several times a second) and, on a new best, writes
// best.pt and best.json; a failed write is logged and the run goes on.
void report(std::uint32_t node, const run_outputs& out, const eval_point& pt,
            bool best, bool solved, const eval_hooks& hooks) {
  log::write(best || solved ? log::level::info : log::level::debug, node,
             "eval at train_iter " + std::to_string(pt.train_iter)
               + ", env_step " + std::to_string(pt.env_step) + ": return "
               + fixed(pt.mean) + " (min " + fixed(pt.min, 0) + ", max "
               + fixed(pt.max, 0) + ")" + (best ? " new best" : ""));
  if (!best || !hooks.save)
    return;
  auto err = hooks.save(out.path("best.pt"));
  if (!err)
    err = write_json(out.path("best.json"),
                     {{"eval_return", pt.mean},
                      {"env_step", pt.env_step},
                      {"train_iter", pt.train_iter}});
  if (err)
    log::error(node, "cannot write best.pt: " + render(err));
}

} // namespace

middleware evaluator(std::shared_ptr<run_outputs> out, eval_hooks hooks,
                     eval_options opts) {
  struct state {
    std::shared_ptr<run_outputs> out;
    eval_hooks hooks;
    eval_options opts;
    node_services* svc = nullptr;
    std::uint64_t evals = 0;
  };
  auto st = std::make_shared<state>();
  st->out = std::move(out);
  st->hooks = std::move(hooks);
  st->opts = opts;
  if (!st->hooks.version)
    st->hooks.version = [](const context& ctx) {
      return ctx.model_version;
    };
  middleware m;
  m.name = "evaluate";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](context& ctx) -> step {
    auto& out = *st->out;
    auto& opts = st->opts;
    auto node = st->svc->node_id();
    // A resumed run's evaluator starts from the checkpoint's counters (a
    // learner that evaluates has them already).
    if (ctx.total_step == 0 && !st->svc->roles().has(role::learner)) {
      ctx.env_step += out.resumed().env_step;
      ctx.train_iter = std::max(ctx.train_iter, out.resumed().train_iter);
    }
    if (ctx.last_eval_iter >= 0
        && ctx.train_iter - ctx.last_eval_iter < opts.every)
      return proceed;
    double cpu = 0;
    auto returns = [&] {
      cpu_span span{cpu};
      return play_greedy(st->hooks.make_env, opts.episodes,
                         opts.seed * 7 + 1000003 * ++st->evals, st->hooks.act);
    }();
    out.add_cpu("evaluator", cpu);
    if (!returns) {
      log::error(node, "evaluation failed: " + render(returns.error()));
      ctx.last_eval_iter = ctx.train_iter;
      return proceed;
    }
    auto pt = make_eval_point(*returns, ctx.env_step, ctx.train_iter,
                              out.seconds());
    ctx.last_eval_iter = ctx.train_iter;
    ctx.last_eval_value = pt.mean;
    ctx.eval_value = pt.mean;
    auto version = st->hooks.version(ctx);
    bool solved = pt.mean >= opts.stop_value
      && (!opts.trained_to_solve || version > 0);
    auto outcome = out.record_eval(pt, solved);
    out.metrics(node, "evaluator",
                {{"train_iter", pt.train_iter},
                 {"env_step", pt.env_step},
                 {"model_version", version},
                 {"eval_return_mean", pt.mean},
                 {"eval_return_min", pt.min},
                 {"eval_return_max", pt.max}});
    report(node, out, pt, outcome.best, solved, st->hooks);
    if (solved && !st->svc->finished()) {
      log::info(node,
                "stop value " + fixed(opts.stop_value) + " reached after "
                  + fixed(pt.seconds, 2) + " s");
      st->svc->request_finish("stop_value");
    }
    return proceed;
  };
  return m;
}

} // namespace dice::rl
