#include "dice/exchangers/periodical_model_exchanger.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include "caf/make_message.hpp"
#include "caf/send.hpp"

#include "loader_bridge.hpp"
#include "model_cache.hpp"

#include <memory>

namespace dice {

caf::expected<exchange_mode> parse_exchange_mode(std::string_view str) {
  if (str == "send")
    return exchange_mode::send;
  if (str == "receive")
    return exchange_mode::receive;
  return make_error(errc::invalid_config,
                    "periodical model exchanger: unknown mode '"
                      + std::string{str} + "' (expected send or receive)");
}

namespace {

struct periodical_exchanger_state {
  model_port_ptr model;
  periodical_model_exchanger_options opts;
  node_services* svc = nullptr;
  detail::model_cache cache;
  // DI-engine's `_id_counter`: next id to send, or id of the newest cached.
  std::int64_t id_counter = 0;
  // DI-engine's `_model_stale`: iterations the loaded model has served.
  std::int64_t stale = 0;

  bool fresh(caf::actor_clock::time_point since) const {
    if (opts.delay_toleration == caf::timespan::max())
      return true;
    return svc->now() - since < opts.delay_toleration;
  }

  void on_model(const model_snapshot& x) {
    // DI-engine's receiver-side filter: only multiples of our period.
    if (x.version % opts.period != 0)
      return;
    if (cache.offer(*svc, x))
      id_counter = x.version;
  }

  // One pass of DI-engine's `_update_model` loop; waits instead of sleeping.
  step update(context& ctx, caf::actor_clock::time_point start) {
    for (;;) {
      if (cache.slot) {
        if (fresh(cache.arrived)) {
          if (cache.load(*svc, *model, ctx)) {
            stale = 1;
            return proceed;
          }
          continue; // did not fit: dropped, look again
        }
        // Too old to load. DI-engine kept it and spun at 100% CPU for 60 s;
        // dice drops it and waits for a fresh one.
        svc->add_to_report(report_counter::models_dropped);
        log::warning(svc->node_id(),
                     "dropped model v" + std::to_string(cache.slot->version)
                       + ": older than delay_toleration");
        cache.slot.reset();
      }
      // No new model: reuse the loaded one while it is neither stale nor
      // too old (the arrival time of the last model counts).
      if (stale < opts.stale_toleration && fresh(cache.arrived)) {
        ++stale;
        return proceed;
      }
      break;
    }
    auto left = detail::remaining(*svc, start, opts.timeout);
    auto resume = [this, start](context& ctx, wait_outcome outcome) -> step {
      if (outcome == wait_outcome::finished)
        return proceed;
      if (outcome == wait_outcome::timed_out) {
        log::warning(svc->node_id(),
                     "Timeout when waiting for new model! Node id: "
                       + std::to_string(svc->node_id()));
        ++stale;
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

middleware periodical_model_exchanger(model_port_ptr model,
                                      periodical_model_exchanger_options opts) {
  auto st = std::make_shared<periodical_exchanger_state>();
  st->model = std::move(model);
  if (opts.period < 1)
    opts.period = 1;
  st->opts = opts;
  st->id_counter = opts.mode == exchange_mode::receive ? -1 : 0;
  st->stale = opts.stale_toleration;
  middleware result;
  result.name = "periodical_model_exchanger";
  result.attach = [st](node_services& svc) {
    st->svc = &svc;
    // DI-engine never initialised `_time`; dice starts it at attach time.
    st->cache.arrived = svc.now();
    if (st->opts.model_loader)
      svc.flush_before_done(st->opts.model_loader);
    if (st->opts.mode == exchange_mode::receive) {
      auto name = st->opts.event_name;
      svc.on(topic<model_snapshot>{name}, [st](const model_snapshot& x) {
        st->on_model(x);
      });
      svc.on(topic<storage_ref>{name}, [st, name](const storage_ref& ref) {
        detail::load_reference(*st->svc, st->opts.model_loader, name, ref);
      });
    }
  };
  result.on_stop = [st](context&) {
    if (st->opts.model_loader)
      caf::anon_send_exit(st->opts.model_loader,
                          caf::exit_reason::user_shutdown);
  };
  result.before = [st](context& ctx) -> step {
    if (st->opts.mode != exchange_mode::receive || ctx.total_step == 0
        || st->svc->finished())
      return proceed;
    return st->update(ctx, st->svc->now());
  };
  result.after = [st](context& ctx) {
    if (st->opts.mode != exchange_mode::send)
      return;
    if (st->id_counter % st->opts.period == 0) {
      auto snap = detail::stamped_snapshot(*st->svc, *st->model,
                                           st->id_counter);
      if (snap) {
        st->svc->add_to_report(report_counter::models_sent);
        ctx.model_version = snap->version;
        if (st->opts.model_loader)
          st->svc->store(st->opts.model_loader, std::move(*snap),
                         std::vector<std::string>{st->opts.event_name});
        else
          st->svc->emit(topic<model_snapshot>{st->opts.event_name},
                        std::move(*snap));
      } else {
        log::error(st->svc->node_id(),
                   "cannot snapshot the model: " + render(snap.error()));
      }
    }
    ++st->id_counter;
  };
  return result;
}

} // namespace dice
