#include "dice/runtime/local_cluster.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/runtime/stop_signals.hpp"
#include "runtime/role_supervisor.hpp"

#include "caf/exit_reason.hpp"
#include "caf/scheduler/test_coordinator.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"

#include <algorithm>
#include <map>

namespace dice {

namespace {

// One role actor per node on `the_router`, each waiting for start_atom and
// reporting to `report_to`, under a supervisor that restarts it.
std::vector<role_supervisor> make_nodes(std::vector<local_node> nodes,
                                        const router_actor& the_router,
                                        const local_run_options& opts,
                                        const caf::actor& report_to) {
  std::vector<role_supervisor> result;
  for (auto& n : nodes) {
    role_config cfg;
    cfg.node = n.id;
    cfg.roles = n.roles;
    cfg.max_step = n.max_step >= 0 ? n.max_step : opts.max_step;
    cfg.router = the_router;
    cfg.wait_for_start = true;
    cfg.print_report = opts.print_reports;
    cfg.report_to = report_to;
    cfg.detached = opts.detached_roles && n.detached;
    cfg.thread_nice = opts.role_nice;
    result.emplace_back(std::move(cfg), std::move(n.pipe), opts.max_restarts,
                        std::move(n.rebuild));
  }
  return result;
}

// The supervisor of the incarnation that went down (nullptr: none).
role_supervisor* owner_of(std::vector<role_supervisor>& nodes,
                          const caf::actor_addr& who) {
  for (auto& n : nodes)
    if (n.current().address() == who)
      return &n;
  return nullptr;
}

// With CAF's test coordinator (dice.deterministic) everything runs on this
// thread in FIFO order and time only moves when every actor waits: run
// jobs until none is left, then fire the next timeout, until every node
// reported. The same seed gives the same run.
caf::expected<std::vector<node_report>>
run_deterministic(caf::actor_system& sys,
                  caf::scheduler::test_coordinator& sched,
                  std::vector<local_node> local_nodes, local_run_options opts) {
  caf::scoped_actor sink{sys, true};
  auto the_router = dice::spawn_router(sys, router_config{});
  auto nodes = make_nodes(std::move(local_nodes), the_router, opts,
                          caf::actor_cast<caf::actor>(sink));
  for (auto& n : nodes)
    sink->monitor(n.start(sys));
  sched.run(); // every node joins the router before any starts
  // Named: a role actor drops anonymous messages.
  for (auto& n : nodes)
    sink->send(n.current(), start_atom::value);
  std::map<std::uint32_t, node_report> reports;
  caf::error failure;
  auto collect = [&] {
    bool more = true;
    while (more)
      sink->receive(
        [&](const node_report& rep) {
          reports[rep.node] = rep;
        },
        [&](const caf::down_msg& dm) {
          auto n = owner_of(nodes, dm.source);
          if (n != nullptr && is(dm.reason, errc::user_exception)) {
            if (n->restart(sys, dm.reason))
              sink->monitor(n->current());
            else if (!failure)
              failure = dm.reason;
          }
        },
        caf::after(std::chrono::seconds{0}) >>
          [&] {
            more = false;
          });
  };
  while (reports.size() < nodes.size() && !failure) {
    if (sched.try_run_once())
      continue;
    collect();
    if (reports.size() >= nodes.size() || failure
        || !sched.has_pending_timeout())
      break;
    sched.trigger_timeout();
  }
  collect();
  caf::anon_send_exit(the_router, caf::exit_reason::user_shutdown);
  sched.run();
  if (reports.size() < nodes.size()) {
    for (auto& n : nodes)
      caf::anon_send_exit(n.current(), caf::exit_reason::user_shutdown);
    sched.run();
    if (failure)
      return failure;
    return make_error(errc::timeout,
                      "the deterministic run stalled: "
                        + std::to_string(reports.size()) + " of "
                        + std::to_string(nodes.size()) + " nodes reported");
  }
  std::vector<node_report> result;
  for (auto& [id, rep] : reports)
    result.push_back(rep);
  return result;
}

} // namespace

caf::expected<std::vector<node_report>>
run_local(caf::actor_system& sys, std::vector<local_node> local_nodes,
          local_run_options opts) {
  if (auto sched = dynamic_cast<caf::scheduler::test_coordinator*>(
        &sys.scheduler()))
    return run_deterministic(sys, *sched, std::move(local_nodes),
                             std::move(opts));
  caf::scoped_actor self{sys};
  auto first_node = local_nodes.empty() ? 0u : local_nodes.front().id;
  auto the_router = dice::spawn_router(sys, router_config{});
  auto nodes = make_nodes(std::move(local_nodes), the_router, opts,
                          caf::actor_cast<caf::actor>(self));
  for (auto& n : nodes)
    self->monitor(n.start(sys));
  auto stop_all = [&] {
    for (auto& n : nodes)
      self->send_exit(n.current(), caf::exit_reason::user_shutdown);
    self->send_exit(the_router, caf::exit_reason::user_shutdown);
  };
  // Every node joins the router before any starts, so no early message finds
  // a topic without its subscribers.
  caf::error failure;
  for (auto& n : nodes)
    self->request(n.current(), std::chrono::seconds{30}, ready_atom::value)
      .receive([](bool) {},
               [&](caf::error& err) {
                 failure = err;
               });
  if (failure) {
    stop_all();
    return failure;
  }
  for (auto& n : nodes)
    self->send(n.current(), start_atom::value);
  // Declared after `self`: unregistered before the scoped actor is gone.
  std::shared_ptr<void> signals;
  if (opts.stop_on_signals && !nodes.empty())
    signals = finish_on_stop_signal(caf::actor_cast<caf::actor>(self),
                                    first_node);
  std::map<std::uint32_t, node_report> reports;
  std::size_t downs = 0;
  bool timed_out = false;
  self->receive_while([&] {
    return downs < nodes.size() && !timed_out && !failure;
  })(
    [&](const node_report& rep) {
      reports[rep.node] = rep;
    },
    [&](const finish& x) {
      // A stop signal (above): the first node (the learner) finishes as
      // if it had asked, and the run ends the way it does then.
      self->send(nodes.front().current(), x);
    },
    [&](const caf::down_msg& dm) {
      // A node whose middleware threw comes back on the same router.
      auto n = owner_of(nodes, dm.source);
      if (n != nullptr && is(dm.reason, errc::user_exception)) {
        if (n->restart(sys, dm.reason)) {
          self->monitor(n->current());
          return;
        }
        failure = dm.reason;
      }
      ++downs;
    },
    caf::after(opts.deadline) >>
      [&] {
        timed_out = true;
      });
  self->send_exit(the_router, caf::exit_reason::user_shutdown);
  if (failure) {
    stop_all();
    return failure;
  }
  if (timed_out) {
    stop_all();
    return make_error(
      errc::timeout,
      "no node of the in-process run reported for "
        + std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(opts.deadline)
            .count())
        + " s");
  }
  std::vector<node_report> result;
  for (auto& [id, rep] : reports)
    result.push_back(rep);
  return result;
}

} // namespace dice
