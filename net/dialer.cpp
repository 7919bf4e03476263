#include "net/dialer.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "net/handover.hpp"
#include "net/preamble.hpp"
#include "net/socket.hpp"

#include "caf/blocking_actor.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/node_id.hpp"

#include <unistd.h>

#include <set>

namespace dice::net {

using clock_type = deadline_clock;

namespace {

// One attempt at dial_channel. `cut_early` is set when the acceptor closed
// the connection before a byte of its hello: at its cap on pending
// connections a listener under a connection flood closes the oldest
// connection that has not sent its hello, which can be a genuine dialer
// whose first write the scheduler delayed (net/listener.cpp).
caf::expected<unique_fd> dial_once(const std::string& secret,
                                   const std::string& host, std::uint16_t port,
                                   channel ch,
                                   deadline_clock::time_point deadline,
                                   std::string* binding, bool& cut_early) {
  cut_early = false;
  auto fd = connect_tcp(host, port, deadline);
  if (!fd)
    return fd.error();
  preamble_dialer hs{secret, random_nonce(preamble_nonce_size), ch};
  // The socket closes with `fd` on every failure.
  auto fail = [](caf::error err) -> caf::expected<unique_fd> {
    return err;
  };
  bool first = true;
  while (hs.state() == preamble_state::running) {
    if (auto err = send_all(fd->get(), hs.take_output(), deadline))
      return fail(std::move(err));
    auto bytes = recv_exactly(fd->get(), hs.want(), deadline);
    // Closed or silent in the middle of the preamble: another dice
    // version, not dice, or a peer that cut us off (time limit, cap).
    if (!bytes) {
      cut_early = first && is(bytes.error(), errc::unreachable);
      return fail(
        make_error(errc::handshake_failed,
                   "no preamble from the peer: " + render(bytes.error())));
    }
    first = false;
    hs.feed(bytes->data(), bytes->size());
  }
  if (hs.state() == preamble_state::failed) {
    auto why = hs.error();
    if (why == preamble_error::bad_proof
        || why == preamble_error::acceptor_lacks_secret)
      count(trust_event::auth_refused);
    return fail(dialer_failure(why));
  }
  if (auto err = send_all(fd->get(), hs.take_output(), deadline))
    return fail(std::move(err));
  if (binding != nullptr)
    *binding = hs.binding();
  return std::move(*fd);
}

} // namespace

caf::expected<unique_fd> dial_channel(const std::string& secret,
                                      const std::string& host,
                                      std::uint16_t port, channel ch,
                                      deadline_clock::time_point deadline,
                                      std::string* binding) {
  // A connection cut before the acceptor's hello is tried again at once, a
  // few times within the deadline: under a flood the listener's cap may
  // have taken it before its first bytes were read (1 of 20 dials in CI,
  // 300 slowloris connections reopened at 29,000/s). Anything else (a
  // refused proof, another protocol that answered) is not retried.
  bool cut_early = false;
  for (int attempt = 1;; ++attempt) {
    auto fd = dial_once(secret, host, port, ch, deadline, binding, cut_early);
    if (fd || !cut_early || attempt == 4 || clock_type::now() >= deadline)
      return fd;
  }
}

namespace {

void dial_worker(caf::blocking_actor* self, dialer_config cfg,
                 caf::actor basp) {
  self->receive([&](caf::connect_atom, const std::string& host,
                    std::uint16_t port) {
    auto rp = self->make_response_promise();
    auto deadline = clock_type::now() + cfg.connect_timeout;
    auto where = host + ":" + std::to_string(port);
    auto report = [&](caf::error err) {
      // Refusals are configuration errors a user must see; unreachable
      // peers are retried by the router and only logged at debug level.
      if (is(err, errc::unauthorized) || is(err, errc::handshake_failed))
        log::error(cfg.node,
                   "handshake with " + where + " refused: " + render(err));
      else
        log::debug(cfg.node, "cannot connect to {}: {}", where, render(err));
      rp.deliver(std::move(err));
    };
    auto fd = dial_channel(cfg.secret, host, port, channel::control, deadline);
    if (!fd)
      return report(fd.error());
    auto scribe = make_scribe(self->system(), std::move(*fd), cfg.tls, false,
                              scribe_limits{cfg.node, cfg.max_basp_payload});
    if (!scribe)
      return report(scribe.error());
    auto left = std::chrono::duration_cast<caf::timespan>(deadline
                                                          - clock_type::now());
    if (left.count() <= 0)
      left = caf::timespan{1};
    self
      ->request(basp, left, caf::connect_atom::value, std::move(*scribe), port)
      .receive(
        [&](caf::node_id& nid, caf::strong_actor_ptr& ptr,
            std::set<std::string>& ifs) {
          rp.deliver(std::move(nid), std::move(ptr), std::move(ifs));
        },
        [&](caf::error& err) {
          report(std::move(err));
        });
  });
}

} // namespace

caf::actor spawn_dialer(caf::actor_system& sys, dialer_config cfg) {
  auto basp = basp_broker_of(sys);
  return sys.spawn([cfg, basp](caf::event_based_actor* self) -> caf::behavior {
    return {
      [=](caf::connect_atom atm, std::string& host,
          std::uint16_t port) -> caf::delegated<caf::message> {
        auto worker = self->system().spawn(dial_worker, cfg, basp);
        return self->delegate(worker, atm, std::move(host), port);
      },
    };
  });
}

} // namespace dice::net
