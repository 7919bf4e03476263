#include "support/deterministic.hpp"

#include "caf/exit_reason.hpp"
#include "caf/send.hpp"

namespace dice::test {

test_config::test_config() {
  set("scheduler.policy", caf::atom("testing"));
  set("logger.verbosity", caf::atom("quiet"));
  dice::add_message_types(*this);
}

log_capture::log_capture() {
  prev_ = log::set_sink(
    [this](log::level lvl, std::uint32_t, const std::string& msg) {
      if (lvl < log::level::warning)
        return;
      std::lock_guard<std::mutex> guard{mtx_};
      lines.push_back(std::string{log::to_string(lvl)} + ": " + msg);
    });
}

log_capture::~log_capture() {
  log::set_sink(std::move(prev_));
}

std::size_t log_capture::count(const std::string& needle) const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::size_t n = 0;
  for (auto& line : lines)
    if (line.find(needle) != std::string::npos)
      ++n;
  return n;
}

deterministic::deterministic()
  : sys(cfg),
    sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())),
    sink(sys, true) {
  // nop
}

deterministic::~deterministic() {
  for (auto& x : spawned)
    caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
  sched.run();
}

std::size_t deterministic::run() {
  return sched.run();
}

void deterministic::advance(caf::timespan d) {
  sched.advance_time(d);
  sched.run();
}

router_actor deterministic::spawn_router() {
  auto result = dice::spawn_router(sys, router_config{});
  spawned.push_back(caf::actor_cast<caf::actor>(result));
  sched.run();
  return result;
}

role_actor deterministic::spawn_role(const router_actor& b, std::uint32_t node,
                                     role_set roles, pipeline pipe,
                                     std::int64_t max_step) {
  role_config rc;
  rc.node = node;
  rc.roles = roles;
  rc.router = b;
  rc.max_step = max_step;
  rc.wait_for_start = true;
  rc.incarnation = 1000 + node;
  rc.report_to = caf::actor_cast<caf::actor>(sink);
  auto result = sys.spawn(role_behavior, std::move(rc), std::move(pipe));
  spawned.push_back(caf::actor_cast<caf::actor>(result));
  return result;
}

role_state& deterministic::state_of(const role_actor& x) {
  auto ptr = caf::actor_cast<caf::abstract_actor*>(x);
  return dynamic_cast<caf::stateful_actor<role_state, role_actor::base>&>(*ptr)
    .state;
}

void deterministic::start(std::initializer_list<role_actor> xs) {
  sched.run();
  for (auto& x : xs)
    sink->send(x, start_atom::value);
  sched.run();
}

std::map<std::uint32_t, node_report> deterministic::reports() {
  std::map<std::uint32_t, node_report> result;
  bool more = true;
  while (more)
    sink->receive(
      [&](const node_report& x) {
        result[x.node] = x;
      },
      caf::after(std::chrono::seconds{0}) >>
        [&] {
          more = false;
        });
  return result;
}

} // namespace dice::test
