#include "dice/runtime/node.hpp"

#include "actors/gate.hpp"
#include "dice/actors/role_actor.hpp"
#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/detail/learner_group_hello.hpp"
#include "dice/runtime/stop_signals.hpp"
#include "dice/security/auth.hpp"
#include "dice/type_ids.hpp"
#include "net/data_plane.hpp"
#include "net/dialer.hpp"
#include "net/handover.hpp"
#include "net/listener.hpp"
#include "runtime/role_supervisor.hpp"
#include "storage/context_spool.hpp"

#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/scoped_actor.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

namespace dice {

caf::expected<node> node::start(caf::actor_system& sys, node_config cfg) {
  if (cfg.roles.empty())
    cfg.roles = default_roles(cfg.index, cfg.workers, cfg.learners);
  node result{sys, std::move(cfg)};
  auto& c = result.cfg_;
  if (c.cpu_latency_us >= 0) {
    // A speed setting: the node runs without it, and says why.
    if (auto req = cpu_latency_request::hold(c.cpu_latency_us)) {
      result.latency_ = std::make_shared<cpu_latency_request>(std::move(*req));
      log::info(c.id,
                "holding a CPU latency request of "
                  + std::to_string(c.cpu_latency_us)
                  + " us while the node runs (--dice.cpu-latency-us)");
    } else {
      log::warning(c.id, render(req.error()) + "; running without it");
    }
  }
  router_config bc;
  bc.node = c.id;
  bc.roles = c.roles;
  bc.coalesce = c.coalesce;
  bc.expect_peers = c.distributed;
  bc.peer_loss_timeout = c.peer_loss_timeout;
  bc.connect_timeout = c.connect_timeout;
  bc.secret = c.secret;
  // The node's listener and dialer run the preamble on every connection
  // before BASP reads it: with a secret, the router need not ask again.
  bc.preamble_proven = !c.secret.empty();
  bc.tls = c.tls.any();
  if (bc.tls) {
    if (auto err = validate(c.tls))
      return err;
    if (!sys.has_openssl_manager())
      return make_error(errc::invalid_config,
                        "TLS requested, but the actor system lacks CAF's "
                        "openssl module (use dice::node_system_config)");
  }
  // A node that (re)joins gets the latest model and train_iter at once.
  // So does a learner of a group: rank 0's rendezvous address.
  bc.retained_topics = {model_topic, context_topic(role::learner),
                        learner_group_topic};
  // Peers are dialled raw and authenticated before BASP sees the socket.
  bc.dialer = net::spawn_dialer(sys,
                                net::dialer_config{c.id, c.secret, bc.tls,
                                                   c.connect_timeout,
                                                   c.max_basp_payload});
  if (c.distributed && c.data_channel) {
    net::data_plane_config dc;
    dc.node = c.id;
    dc.secret = c.secret;
    // The control connection's TLS files: data connections run TLS too.
    dc.tls = c.tls;
    dc.connect_timeout = c.connect_timeout;
    result.data_ = net::data_plane::make(sys, std::move(dc));
    bc.data = result.data_;
    // Relays need members connected to each other: a mesh (dice-launch's
    // default). A star, or peers attached by hand, keep the direct path.
    bc.relay = c.topo == topology::mesh ? c.relay : relay_mode::off;
    bc.relay_deadline = c.relay_deadline;
    bc.relay_fanout = c.relay_fanout;
  }
  result.router_ = dice::spawn_router(sys, std::move(bc));
  if (c.distributed && c.listen)
    if (auto err = result.listen())
      return err;
  return result;
}

caf::error node::listen() {
  auto& c = cfg_;
  auto& sys = *sys_;
  auto fail = [&](caf::error err) {
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    return err;
  };
  // Peers reach the router through a gate no remote exit can stop.
  auto gate = spawn_gate(sys, router_);
  auto basp = net::basp_broker_of(sys);
  auto sigs = sys.message_types(gate);
  auto tls = c.tls.any();
  auto port = std::make_shared<std::uint16_t>(0);
  auto node_id = c.id;
  auto limits = net::scribe_limits{c.id, c.max_basp_payload};
  auto data = data_;
  net::listener_config lc{
    c.id, c.host, c.port, c.secret, c.handshake_timeout, c.max_pending};
  lc.fd = c.listen_fd;
  // Runs on the listener's thread for each connection that finished the
  // preamble: only then does CAF get the socket.
  auto handover = [&sys, basp, gate, sigs, tls, port, node_id, limits,
                   data](unique_fd fd, net::channel ch, const std::string& peer,
                         const std::string& binding) {
    if (ch == net::channel::data) {
      // Bound to a control session by its proof, or closed unanswered
      // (with `fd`).
      if (data && data->enabled())
        data->accept(std::move(fd), peer, binding);
      return;
    }
    if (ch != net::channel::control)
      return; // closes `fd`
    auto scribe = net::make_scribe(sys, std::move(fd), tls, true, limits);
    if (!scribe) {
      log::warning(node_id,
                   "connection from " + peer
                     + " passed the preamble, then failed: "
                     + render(scribe.error()));
      return;
    }
    net::serve_basp(basp, std::move(*scribe), *port, gate, sigs);
  };
  auto ln = net::listener::open(std::move(lc), handover);
  if (!ln)
    return fail(
      make_error(errc::unreachable,
                 "node " + std::to_string(c.id) + " cannot listen on port "
                   + std::to_string(c.port) + ": " + render(ln.error())));
  auto& l = **ln;
  if (!l.loopback() && c.secret.empty() && !tls) {
    if (!c.insecure)
      return fail(make_error(
        errc::invalid_config,
        "node " + std::to_string(c.id) + " would listen on " + l.address()
          + ", beyond loopback, with neither a cluster secret nor TLS: "
            "anyone who reaches the port could join the cluster. Give every "
            "node the same secret file (--dice.secret-file=FILE, at least "
          + std::to_string(min_secret_bytes)
          + " bytes), or TLS (--openssl.certificate/key/cafile), or listen "
            "on loopback only (--dice.host=127.0.0.1); "
            "--dice.insecure=true accepts the risk"));
    log::warning(c.id,
                 "listening on " + l.address()
                   + " with neither a cluster secret nor TLS "
                     "(--dice.insecure): anyone who reaches the port "
                     "and speaks dice can join");
  }
  *port = l.port();
  port_ = l.port();
  listener_ = std::shared_ptr<net::listener>{std::move(*ln)};
  if (!c.accept_once_running)
    listener_->start();
  // Launchers read this line to learn an ephemeral port.
  std::cout << "dice-node " << c.id << " listening on port " << port_
            << std::endl;
  return caf::none;
}

caf::expected<node_report> node::run(pipeline pipe, node_run_options opts) {
  // A spool directory another user could write to is refused before
  // anything runs: the node would otherwise go on without its spool (or,
  // before, republish what was planted there as its own deltas).
  if (!cfg_.spool_dir.empty())
    if (auto err = context_spool::prepare_dir(cfg_.spool_dir)) {
      log::error(cfg_.id, "refusing --dice.spool-dir: " + render(err));
      return err;
    }
  caf::scoped_actor self{*sys_};
  role_config rc;
  rc.node = cfg_.id;
  rc.roles = cfg_.roles;
  rc.max_step = opts.max_step;
  rc.router = router_;
  rc.wait_for_start = true;
  rc.print_report = opts.print_report;
  rc.report_to = caf::actor_cast<caf::actor>(self);
  rc.detached = opts.detached_role;
  rc.thread_nice = cfg_.role_nice;
  rc.restarts = cfg_.restart_count;
  rc.spool_dir = cfg_.spool_dir;
  rc.spool_fsync = cfg_.spool_fsync;
  rc.spool_key = spool_key(cfg_.secret);
  role_supervisor sup{std::move(rc), std::move(pipe),
                      opts.max_restarts >= 0 ? opts.max_restarts
                                             : cfg_.max_restarts,
                      std::move(opts.rebuild)};
  auto member = sup.start(*sys_);
  self->monitor(member);
  caf::error failure;
  self->request(member, std::chrono::seconds{30}, ready_atom::value)
    .receive([](bool) {},
             [&](caf::error& err) {
               failure = err;
             });
  if (failure) {
    self->send_exit(member, caf::exit_reason::user_shutdown);
    return failure;
  }
  // Accept and attach once the member has joined, so each handshake lists
  // its topics: a collector that started on a handshake without them sent
  // its first delta past this node's learner (lost until the 5 s resend,
  // and for good when the run stopped before it).
  if (listener_)
    listener_->start();
  for (auto& ep : cfg_.attach_to)
    self->send(router_, attach_atom::value, ep.host, ep.port);
  if (cfg_.distributed && cfg_.min_peers > 0) {
    auto need = static_cast<std::uint32_t>(cfg_.min_peers);
    auto t0 = std::chrono::steady_clock::now();
    self->request(router_, cfg_.start_timeout, peers_atom::value, need)
      .receive(
        [&](std::uint32_t n) {
          auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
          log::info(cfg_.id,
                    std::to_string(n) + " peer(s) connected after "
                      + std::to_string(ms) + " ms; starting");
        },
        [&](caf::error&) {
          log::warning(cfg_.id,
                       "fewer than " + std::to_string(need)
                         + " peers connected in time; starting "
                           "anyway");
        });
  }
  self->send(member, start_atom::value);
  // Declared after `self`: unregistered before the scoped actor is gone.
  std::shared_ptr<void> signals;
  if (opts.stop_on_signals)
    signals = finish_on_stop_signal(caf::actor_cast<caf::actor>(self), cfg_.id);
  std::optional<node_report> rep;
  bool down = false;
  bool timed_out = false;
  self->receive_while([&] {
    return !down && !timed_out;
  })(
    [&](const node_report& x) {
      rep = x;
    },
    [&](const finish& x) {
      // A stop signal (above): the role actor finishes as if it had asked.
      self->send(sup.current(), x);
    },
    [&](const caf::down_msg& dm) {
      // A role actor whose middleware threw comes back with a fresh
      // context (--dice.max-restarts); the peers keep their connections.
      if (dm.source == sup.current().address() && sup.restart(*sys_, dm.reason))
        self->monitor(sup.current());
      else if (dm.source == sup.current().address())
        down = true;
    },
    caf::after(opts.deadline) >>
      [&] {
        timed_out = true;
      });
  if (timed_out) {
    self->send_exit(sup.current(), caf::exit_reason::user_shutdown);
    return make_error(errc::timeout,
                      "node " + std::to_string(cfg_.id)
                        + " did not finish before its deadline");
  }
  // The report is sent before the member quits; collect it if it raced.
  if (!rep)
    self->receive(
      [&](const node_report& x) {
        rep = x;
      },
      caf::after(std::chrono::milliseconds{100}) >> [] {});
  if (!rep)
    return make_error(errc::finished,
                      "node " + std::to_string(cfg_.id)
                        + " stopped without a report");
  return *rep;
}

void node::stop() {
  if (listener_)
    listener_->stop();
  if (data_)
    data_->stop();
  if (router_)
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
  // Copies of the node share the request: stop drops it for them all.
  if (latency_)
    latency_->release();
}

} // namespace dice
