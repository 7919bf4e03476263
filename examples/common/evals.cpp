#include "evals.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <exception>
#include <iostream>
#include <limits>

namespace demo {

void report_eval(std::uint32_t node, const eval_point& pt, bool best,
                 bool solved, const std::string& out,
                 const std::function<void(const std::string&)>& save_best) {
  dice::log::write(
    best || solved ? dice::log::level::info : dice::log::level::debug, node,
    "eval at train_iter " + std::to_string(pt.train_iter) + ", env_step "
      + std::to_string(pt.env_step) + ": return " + fixed(pt.mean) + " (min "
      + fixed(pt.min, 0) + ", max " + fixed(pt.max, 0) + ")"
      + (best ? " new best" : ""));
  if (!best)
    return;
  try {
    save_best(path_in(out, "best.pt"));
    write_json(path_in(out, "best.json"),
               {{"eval_return", pt.mean},
                {"env_step", pt.env_step},
                {"train_iter", pt.train_iter}});
  } catch (const std::exception& e) {
    dice::log::error(node, std::string{"cannot write best.pt: "} + e.what());
  }
}

void stop_when_solved(dice::node_services& svc, std::uint32_t node, bool solved,
                      double stop_value, double seconds) {
  if (!solved || svc.finished())
    return;
  dice::log::info(node,
                  "stop value " + fixed(stop_value) + " reached after "
                    + fixed(seconds, 2) + " s");
  svc.request_finish("stop_value");
}

void finish_at_limits(dice::node_services& svc, std::int64_t env_step,
                      std::int64_t max_env_steps, double seconds,
                      double max_seconds) {
  if (max_env_steps > 0 && env_step >= max_env_steps && !svc.finished())
    svc.request_finish("max_env_steps");
  if (max_seconds > 0 && seconds >= max_seconds && !svc.finished())
    svc.request_finish("max_seconds");
}

double take_mean(std::vector<double>& returns) {
  if (returns.empty())
    return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (auto r : returns)
    sum += r;
  auto mean = sum / static_cast<double>(returns.size());
  returns.clear();
  return mean;
}

dice::middleware eval_step(std::shared_ptr<run_record> run, std::uint32_t node,
                           eval_settings s, eval_hooks hooks) {
  struct state {
    std::shared_ptr<run_record> run;
    std::uint32_t node = 0;
    eval_settings s;
    eval_hooks hooks;
    dice::node_services* svc = nullptr;
    std::uint64_t evals = 0;
  };
  auto st = std::make_shared<state>();
  st->run = std::move(run);
  st->node = node;
  st->s = std::move(s);
  st->hooks = std::move(hooks);
  dice::middleware m;
  m.name = "evaluate";
  m.attach = [st](dice::node_services& svc) {
    st->svc = &svc;
  };
  m.before = [st](dice::context& ctx) -> dice::step {
    auto& run = *st->run;
    auto& s = st->s;
    if (ctx.total_step == 0 && st->hooks.first)
      st->hooks.first(ctx, *st->svc);
    if (ctx.last_eval_iter >= 0
        && ctx.train_iter - ctx.last_eval_iter < s.every)
      return dice::proceed;
    auto returns = st->hooks.play(s.episodes,
                                  s.seed * 7 + 1000003 * ++st->evals);
    auto pt = make_eval_point(returns, ctx.env_step, ctx.train_iter,
                              run.seconds());
    ctx.last_eval_iter = ctx.train_iter;
    ctx.last_eval_value = pt.mean;
    ctx.eval_value = pt.mean;
    auto version = st->hooks.version(ctx);
    bool best = false;
    bool solved = pt.mean >= s.stop_value
      && (!st->hooks.trained_to_solve || version > 0);
    {
      std::lock_guard<std::mutex> guard{run.mtx};
      run.evals.push_back(pt);
      if (pt.mean > run.best) {
        run.best = pt.mean;
        best = true;
      }
      if (solved && run.solve_seconds < 0) {
        run.solve_seconds = pt.seconds;
        run.solve_env_steps = pt.env_step;
      }
    }
    run.write_metrics(st->node, "evaluator",
                      {{"train_iter", pt.train_iter},
                       {"env_step", pt.env_step},
                       {"model_version", version},
                       {"eval_return_mean", pt.mean},
                       {"eval_return_min", pt.min},
                       {"eval_return_max", pt.max}});
    report_eval(st->node, pt, best, solved, s.out, st->hooks.save);
    stop_when_solved(*st->svc, st->node, solved, s.stop_value, pt.seconds);
    return dice::proceed;
  };
  return m;
}

int print_eval_only(const caf::expected<std::vector<double>>& returns) {
  if (!returns) {
    std::cerr << dice::render(returns.error()) << '\n';
    return 1;
  }
  double sum = 0;
  for (std::size_t i = 0; i < returns->size(); ++i) {
    std::cout << "episode " << i << ": return " << (*returns)[i] << '\n';
    sum += (*returns)[i];
  }
  std::cout << "mean return over " << returns->size()
            << " episodes: " << sum / returns->size() << '\n';
  return 0;
}

} // namespace demo
