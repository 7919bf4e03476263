#include "dice/exchangers/model_exchanger.hpp"

#include "dice/logging/log.hpp"

#include "caf/make_message.hpp"
#include "caf/send.hpp"

#include "loader_bridge.hpp"
#include "model_cache.hpp"

#include <memory>

namespace dice {

namespace {

struct model_exchanger_state {
  model_port_ptr model;
  model_exchanger_options opts;
  node_services* svc = nullptr;
  bool active = false;
  bool is_learner = false;
  detail::model_cache cache;
  std::int64_t sent = 0;

  // DI-engine's `_update_model`, as a wait instead of a polling loop.
  step update(context& ctx, caf::actor_clock::time_point start) {
    while (cache.slot) {
      if (cache.load(*svc, *model, ctx))
        return proceed;
      // A snapshot that does not fit is dropped; keep waiting for the next
      // one within the same budget (DI-engine's FileNotFoundError path).
    }
    auto left = detail::remaining(*svc, start, opts.timeout);
    auto resume = [this, start](context& ctx, wait_outcome outcome) -> step {
      if (outcome == wait_outcome::finished)
        return proceed;
      if (outcome == wait_outcome::timed_out) {
        log::warning(svc->node_id(),
                     "Timeout when waiting for new model! Node id: "
                       + std::to_string(svc->node_id()));
        return proceed;
      }
      return update(ctx, start);
    };
    return wait_for{[this] {
                      return cache.slot.has_value();
                    },
                    left, resume};
  }
};

} // namespace

middleware model_exchanger(model_port_ptr model, model_exchanger_options opts) {
  auto st = std::make_shared<model_exchanger_state>();
  st->model = std::move(model);
  st->opts = opts;
  middleware result;
  result.name = "model_exchanger";
  result.attach = [st](node_services& svc) {
    st->svc = &svc;
    auto roles = svc.roles();
    if (roles.empty()) {
      log::warning(svc.node_id(),
                   "The task does not have any roles defined, "
                   "the ModelExchanger will not work.");
      return;
    }
    if (roles.size() > 1)
      log::warning(svc.node_id(),
                   "Use multiple roles in one exchanger may lead to "
                   "unexpected result, please check your code.");
    st->active = true;
    st->is_learner = roles.has(role::learner);
    if (st->opts.model_loader)
      svc.flush_before_done(st->opts.model_loader);
    if (!st->is_learner) {
      svc.on(topic<model_snapshot>{model_topic}, [st](const model_snapshot& x) {
        st->cache.offer(*st->svc, x);
      });
      svc.on(topic<storage_ref>{model_topic}, [st](const storage_ref& ref) {
        detail::load_reference(*st->svc, st->opts.model_loader, model_topic,
                               ref);
      });
    }
  };
  result.on_stop = [st](context&) {
    // DI-engine: task.once("finish", model_loader.shutdown).
    if (st->opts.model_loader)
      caf::anon_send_exit(st->opts.model_loader,
                          caf::exit_reason::user_shutdown);
  };
  result.before = [st](context& ctx) -> step {
    if (!st->active || st->is_learner || st->svc->finished())
      return proceed;
    if (ctx.total_step == 0) {
      // DI-engine never waits in iteration 0; a node that (re)joins a
      // running cluster already holds the latest model: use it at once.
      if (st->cache.slot)
        st->cache.load(*st->svc, *st->model, ctx);
      return proceed;
    }
    return st->update(ctx, st->svc->now());
  };
  result.after = [st](context& ctx) {
    if (!st->active || !st->is_learner)
      return;
    auto snap = detail::stamped_snapshot(*st->svc, *st->model, st->sent + 1);
    if (!snap) {
      log::error(st->svc->node_id(),
                 "cannot snapshot the model: " + render(snap.error()));
      return;
    }
    ++st->sent;
    st->svc->add_to_report(report_counter::models_sent);
    ctx.model_version = snap->version;
    if (st->opts.model_loader) {
      // The loader stores it off this actor and publishes the reference.
      st->svc->store(st->opts.model_loader, std::move(*snap),
                     std::vector<std::string>{model_topic});
      return;
    }
    st->svc->emit(topic<model_snapshot>{model_topic}, std::move(*snap));
  };
  return result;
}

} // namespace dice
