#include "dice/exchangers/learner_hello.hpp"

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"

#include "caf/make_message.hpp"

#include <chrono>
#include <memory>

namespace dice {

middleware learner_hello(model_port_ptr model) {
  struct state {
    model_port_ptr model;
    node_services* svc = nullptr;
  };
  auto st = std::make_shared<state>();
  st->model = std::move(model);
  middleware result;
  result.name = "learner_hello";
  result.attach = [st](node_services& svc) {
    st->svc = &svc;
  };
  result.before = [st](context& ctx) -> step {
    auto& svc = *st->svc;
    if (ctx.total_step != 0 || !svc.roles().has(role::learner)
        || svc.finished())
      return proceed;
    // Version 0: the model exchanger numbers the snapshots it sends after
    // each iteration from 1, so receivers take those as newer.
    if (auto snap = st->model->snapshot()) {
      snap->sender = svc.node_id();
      snap->incarnation = svc.incarnation();
      snap->version = 0;
      snap->send_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now()
                               .time_since_epoch())
                             .count();
      svc.emit(topic<model_snapshot>{model_topic}, std::move(*snap));
    } else {
      log::error(svc.node_id(),
                 "cannot snapshot the model: " + render(snap.error()));
    }
    // Sequence 0 precedes the context exchanger's own deltas (from 1).
    context_delta d;
    d.sender = svc.node_id();
    d.incarnation = svc.incarnation();
    d.seq = 0;
    d.sender_roles = svc.roles();
    d.train_iter = ctx.train_iter;
    d.model_version = 0;
    svc.emit(topic<context_delta>{context_topic(role::learner)}, std::move(d));
    return proceed;
  };
  return result;
}

} // namespace dice
