#pragma once

// Internal: the state of a role actor (the pipeline engine and the
// services middleware sees) and its behaviour; the public side is
// dice/actors/role_actor.hpp.

#include "dice/actors/role_actor.hpp"
#include "security/senders.hpp"

#include "caf/stateful_actor.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dice {

/// Id of the deadline messages that end waits (role_state::wait_timers).
constexpr std::uint64_t wait_timer_id = 0;
/// Id of the drain deadline message (role_state::stop).
constexpr std::uint64_t drain_timer_id = 1;

/// State of a role actor; implements the services middleware sees.
struct role_state : node_services {
  role_state(role_actor::stateful_pointer<role_state> self);

  // -- node_services ----------------------------------------------------------

  std::uint32_t node_id() const override;
  role_set roles() const override;
  std::uint64_t incarnation() const override;
  caf::actor_clock::time_point now() const override;
  bool finished() const override;
  bool failing() const override;
  void request_finish(std::string reason) override;
  void add_to_report(report_counter c, std::int64_t n) override;
  void flush_before_done(const storage_loader_actor& loader) override;
  void flush_before_done(const model_loader_actor& loader) override;
  void store(const storage_loader_actor& loader, context_delta x,
             std::vector<std::string> topics) override;
  void store(const model_loader_actor& loader, model_snapshot x,
             std::vector<std::string> topics) override;
  void load(const storage_loader_actor& loader, const storage_ref& ref,
            const std::string& topic) override;
  void load(const model_loader_actor& loader, const storage_ref& ref,
            const std::string& topic) override;
  void quit_when(std::function<bool()> settled) override;
  void schedule(caf::timespan delay, std::function<void()> fn) override;
  void on_peer_event(peer_handler fn) override;
  std::string spool_dir() const override;
  bool spool_fsync() const override;
  std::string spool_key() const override;

  // -- topics -----------------------------------------------------------------

  /// Subscribes `fn` to `topic` (node_services::on).
  void subscribe_erased(const std::string& topic, erased_handler fn) override;

  /// Publishes `(topic, content)` through the router (node_services::emit).
  void publish_erased(const std::string& topic, caf::message msg) override;

  /// Waits for a worker's flush before telling the router this node is done.
  void add_flush_target(caf::actor worker);

  /// Asks `loader` to load `ref` and send `(topic, item)` back here.
  void start_load(const caf::actor& loader, const storage_ref& ref,
                  const std::string& topic);

  // -- iteration engine -------------------------------------------------------

  /// Attaches the middleware and joins the router.
  void init(role_config cfg, pipeline pipe);

  /// Runs one iteration from its first stage.
  void iterate();

  /// Runs stages from `cursor` on until one waits or the iteration ends.
  void advance();

  /// Starts waiting for `w`; false if the wait is pending (actor yields).
  bool arm(wait_for w);

  /// Ends the pending wait with `outcome` and goes on.
  void resume(wait_outcome outcome);

  /// Makes `t` the pending wait's deadline; schedules a deadline message
  /// only if none in flight is due by then.
  void arm_deadline(caf::actor_clock::time_point t);

  /// A wait deadline message arrived: times the wait out if its deadline
  /// passed, else re-arms for it.
  void on_wait_timer();

  /// Delivers a value that arrived on a topic.
  void dispatch(const std::string& topic, const detail::topic_value& x);

  /// Called when the cluster finishes (or this node decides to finish);
  /// `in_step` is true when called from inside an iteration.
  void on_finish(const finish& x, bool in_step = false);

  /// Ends the pending wait with `finished` once no load is outstanding.
  void end_wait_if_finished();

  /// A load started by `load()` was answered (or timed out).
  void load_done();

  /// Hands a peer_event from the router to the middleware.
  void on_peer(const peer_event& x);

  /// Runs the middleware timer `id` if it is still scheduled.
  void on_timer(std::uint64_t id);

  /// Finishes the iteration: next one, or stop.
  void end_iteration();

  /// Ends iterating: once the workers flushed, tells the router that the run
  /// is over and that this node is done, then waits (bounded) until every
  /// member is, still receiving messages.
  void stop(const std::string& reason);

  /// Tells the router the run is over (if this node has not yet) and that
  /// this node is done (after the workers flushed).
  void send_done();

  /// Quits once released, with no load pending and every quit condition
  /// holding.
  void maybe_quit();

  /// Runs the stop hooks, reports and quits.
  void quit_now();

  /// Starts iterating once joined and started.
  void maybe_start();

  /// A middleware threw `what`: quit for a restart while restarts are
  /// left, else end the run with an error finish.
  void on_middleware_error(const std::string& what);

  // -- member variables -------------------------------------------------------

  /// The actor this state belongs to.
  role_actor::stateful_pointer<role_state> self;
  /// Settings.
  role_config cfg;
  /// The middleware.
  pipeline pipe;
  /// The context of the current iteration.
  context ctx;
  /// Counters for the final report.
  node_report rep;
  /// Topic handlers registered by middleware.
  std::map<std::string, std::vector<erased_handler>> handlers;
  /// Index of the stage whose before-part runs or waits.
  std::size_t cursor = 0;
  /// The wait in progress, if any.
  std::optional<wait_for> pending;
  /// When the pending wait times out (max: never).
  caf::actor_clock::time_point wait_deadline{
    caf::actor_clock::time_point::max()};
  /// Due times of the wait deadline messages in flight, the next one last.
  std::vector<caf::actor_clock::time_point> wait_timers;
  /// Joined the router (its subscriptions are known).
  bool joined = false;
  /// Got `start_atom` (or does not need it).
  bool started = false;
  /// An iteration is in progress.
  bool running = false;
  /// The cluster is finished; stop after this iteration.
  bool finishing = false;
  /// stop() ran: draining, no more iterations.
  bool stopped = false;
  /// quit_now() ran.
  bool quitted = false;
  /// Workers to flush before telling the router this node is done.
  std::vector<caf::actor> flush_targets;
  /// Flush answers still outstanding.
  std::size_t pending_flushes = 0;
  /// This node already told the router that the run is over.
  bool finish_sent = false;
  /// The finish this node decided on; it goes to the router from stop(), after
  /// the node's last data.
  std::optional<finish> own_finish;
  /// Loads started by middleware and not answered yet.
  std::size_t pending_loads = 0;
  /// The router released this node (every member of the cluster is done).
  bool released = false;
  /// What must hold before the node quits (node_services::quit_when).
  std::vector<std::function<bool()>> quit_conditions;
  /// Middleware timers by id.
  std::map<std::uint64_t, std::function<void()>> timers;
  /// Source of timer ids.
  std::uint64_t timer_id = 0;
  /// Handlers of peer events.
  std::vector<peer_handler> peer_handlers;
  /// Why the node stops.
  std::string stop_reason;
  /// Requests for `ready_atom` that arrived before joining.
  std::vector<caf::typed_response_promise<bool>> ready_waiters;
  /// Messages dropped because of their sender, logged once per source.
  drop_log drops;
  /// Name in CAF's logs.
  static inline const char* name = "dice.role";
};

/// Behaviour of a role actor.
role_actor::behavior_type
role_behavior(role_actor::stateful_pointer<role_state> self, role_config cfg,
              pipeline pipe);

} // namespace dice
