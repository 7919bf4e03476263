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
#include "caf/stateful_actor.hpp"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace dice::net {

using clock_type = deadline_clock;

namespace {

// A connection begun before the attempt's worker runs (start_dial): the
// TCP handshake and the hello travel while the worker thread wakes up.
struct started_dial {
  unique_fd fd;
  preamble_dialer hs;
  /// The hello's bytes not sent yet (all of them while connecting).
  std::string out;
};

// Connects without blocking to a numeric address and, if connected at
// once (loopback), sends the hello; null for a name (resolving may block)
// or a failure (the attempt proper reports it).
std::unique_ptr<started_dial> start_dial(const std::string& secret,
                                         const std::string& host,
                                         std::uint16_t port, channel ch) {
  auto fd = start_connect(host, port);
  if (!fd)
    return nullptr;
  auto result = std::unique_ptr<started_dial>{new started_dial{
    std::move(*fd),
    preamble_dialer{secret, random_nonce(preamble_nonce_size), ch},
    {}}};
  result->out = result->hs.take_output();
  if (connected_now(result->fd.get())
      && !send_some(result->fd.get(), result->out))
    return nullptr;
  return result;
}

// The preamble of one attempt at dial_channel over `fd` (connected, or
// connecting if `connecting`), `out` being bytes of `hs`'s output still to
// send. `cut_early` is set when the acceptor closed the connection before
// a byte of its hello: at its cap on pending connections a listener under
// a connection flood closes the oldest connection that has not sent its
// hello, which can be a genuine dialer whose first write the scheduler
// delayed (net/listener.cpp).
caf::expected<unique_fd> run_preamble(unique_fd fd, bool connecting,
                                      const std::string& where,
                                      preamble_dialer& hs, std::string out,
                                      deadline_clock::time_point deadline,
                                      std::string* binding, bool& cut_early) {
  cut_early = false;
  if (connecting)
    if (auto err = finish_connect(fd.get(), where, deadline))
      return err;
  // The socket closes with `fd` on every failure.
  bool first = true;
  while (hs.state() == preamble_state::running) {
    out += hs.take_output();
    if (auto err = send_all(fd.get(), out, deadline))
      return err;
    out.clear();
    auto bytes = recv_exactly(fd.get(), hs.want(), deadline);
    // Closed or silent in the middle of the preamble: another dice
    // version, not dice, or a peer that cut us off (time limit, cap).
    if (!bytes) {
      cut_early = first && is(bytes.error(), errc::unreachable);
      return make_error(errc::handshake_failed,
                        "no preamble from the peer: " + render(bytes.error()));
    }
    first = false;
    hs.feed(bytes->data(), bytes->size());
  }
  if (hs.state() == preamble_state::failed) {
    auto why = hs.error();
    if (why == preamble_error::bad_proof
        || why == preamble_error::acceptor_lacks_secret)
      count(trust_event::auth_refused);
    return dialer_failure(why);
  }
  if (auto err = send_all(fd.get(), hs.take_output(), deadline))
    return err;
  if (binding != nullptr)
    *binding = hs.binding();
  return fd;
}

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
  return run_preamble(std::move(*fd), false, host + ":" + std::to_string(port),
                      hs, {}, deadline, binding, cut_early);
}

// dial_channel, its first attempt on `started` if given.
caf::expected<unique_fd> dial(std::unique_ptr<started_dial> started,
                              const std::string& secret,
                              const std::string& host, std::uint16_t port,
                              channel ch, deadline_clock::time_point deadline,
                              std::string* binding) {
  // A connection cut before the acceptor's hello is tried again at once, a
  // few times within the deadline: under a flood the listener's cap may
  // have taken it before its first bytes were read (1 of 20 dials in CI,
  // 300 slowloris connections reopened at 29,000/s). Anything else (a
  // refused proof, another protocol that answered) is not retried.
  bool cut_early = false;
  for (int attempt = 1;; ++attempt) {
    auto fd = started
      ? run_preamble(std::move(started->fd), true,
                     host + ":" + std::to_string(port), started->hs,
                     std::move(started->out), deadline, binding, cut_early)
      : dial_once(secret, host, port, ch, deadline, binding, cut_early);
    started.reset();
    if (fd || !cut_early || attempt == 4 || clock_type::now() >= deadline)
      return fd;
  }
}

} // namespace

caf::expected<unique_fd> dial_channel(const std::string& secret,
                                      const std::string& host,
                                      std::uint16_t port, channel ch,
                                      deadline_clock::time_point deadline,
                                      std::string* binding) {
  return dial(nullptr, secret, host, port, ch, deadline, binding);
}

namespace {

/// A worker that finished its attempt and waits for the next one.
using dial_idle_atom = caf::atom_constant<caf::atom("dialidle")>;

// Finished workers kept waiting for the next attempt: starting a thread and
// its actor costs about 0.1 ms of the ~1.5 ms a connection takes on
// loopback (bench/connect_bench). More attempts at once start more
// workers; those beyond this many end when done.
constexpr std::size_t max_idle_workers = 2;

// Connections the dialer actor began, each waiting for the worker it
// delegated the attempt to (by id; 0: none).
struct handoffs {
  std::mutex mtx;
  std::uint64_t last = 0;
  std::unordered_map<std::uint64_t, std::unique_ptr<started_dial>> started;

  std::uint64_t put(std::unique_ptr<started_dial> x) {
    if (!x)
      return 0;
    std::lock_guard<std::mutex> guard{mtx};
    started.emplace(++last, std::move(x));
    return last;
  }

  std::unique_ptr<started_dial> take(std::uint64_t id) {
    std::lock_guard<std::mutex> guard{mtx};
    auto i = started.find(id);
    if (i == started.end())
      return nullptr;
    auto result = std::move(i->second);
    started.erase(i);
    return result;
  }
};

using handoffs_ptr = std::shared_ptr<handoffs>;

struct dialer_state {
  /// Every worker alive, busy or idle.
  std::set<caf::actor_addr> workers;
  /// Those waiting for an attempt.
  std::vector<caf::actor> idle;
  handoffs_ptr pending = std::make_shared<handoffs>();
};

// One attempt: connect, preamble, then the socket to BASP. Answers the
// request `self` is serving (delegated by the dialer).
void dial_once_for(caf::blocking_actor* self, const dialer_config& cfg,
                   const caf::actor& basp, const std::string& host,
                   std::uint16_t port, std::unique_ptr<started_dial> started) {
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
  auto fd = dial(std::move(started), cfg.secret, host, port, channel::control,
                 deadline, nullptr);
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
  self->request(basp, left, caf::connect_atom::value, std::move(*scribe), port)
    .receive(
      [&](caf::node_id& nid, caf::strong_actor_ptr& ptr,
          std::set<std::string>& ifs) {
        rp.deliver(std::move(nid), std::move(ptr), std::move(ifs));
      },
      [&](caf::error& err) {
        report(std::move(err));
      });
}

// A dialer's worker: one attempt at a time, on its own thread, so a slow
// or silent peer blocks only this worker. Between attempts it waits for
// the next; it ends when the dialer tells it to, or with the dialer (they
// are linked; the worker holds only the dialer's address, so an unused
// dialer still goes away).
void dial_worker(caf::blocking_actor* self, dialer_config cfg, caf::actor basp,
                 caf::actor_addr owner, handoffs_ptr pending) {
  // This thread's random generator seeds itself on first use, and the
  // process's first HMAC loads OpenSSL's provider (about 1 ms): both
  // before the first attempt, not during it.
  random_nonce(preamble_nonce_size);
  hmac_sha256(cfg.secret.empty() ? std::string{"dice"} : cfg.secret, "warm");
  bool running = true;
  self->receive_while(running)(
    [&](caf::connect_atom, const std::string& host, std::uint16_t port,
        std::uint64_t id) {
      dial_once_for(self, cfg, basp, host, port, pending->take(id));
      if (auto dialer = caf::actor_cast<caf::actor>(owner))
        self->send(dialer, dial_idle_atom::value);
      else
        running = false;
    },
    [&](caf::exit_msg&) {
      running = false;
    });
}

} // namespace

caf::actor spawn_dialer(caf::actor_system& sys, dialer_config cfg) {
  auto basp = basp_broker_of(sys);
  return sys.spawn(
    [cfg, basp](caf::stateful_actor<dialer_state>* self) -> caf::behavior {
      auto start_worker = [=] {
        auto w = self->spawn<caf::linked>(dial_worker, cfg, basp,
                                          self->address(), self->state.pending);
        self->state.workers.insert(w.address());
        return w;
      };
      // One worker waits from the start: a node dials its peers right away.
      self->state.idle.push_back(start_worker());
      // A worker that ended (told to, or failed) is forgotten and the
      // dialer goes on; any other exit message ends the dialer as usual.
      self->set_exit_handler([=](caf::exit_msg& msg) {
        auto& st = self->state;
        if (st.workers.erase(msg.source) == 0) {
          if (msg.reason != caf::exit_reason::normal)
            self->quit(std::move(msg.reason));
          return;
        }
        st.idle.erase(std::remove_if(st.idle.begin(), st.idle.end(),
                                     [&](const caf::actor& w) {
                                       return w.address() == msg.source;
                                     }),
                      st.idle.end());
      });
      return {
        [=](caf::connect_atom atm, std::string& host,
            std::uint16_t port) -> caf::delegated<caf::message> {
          auto& idle = self->state.idle;
          caf::actor worker;
          if (idle.empty()) {
            worker = start_worker();
          } else {
            worker = std::move(idle.back());
            idle.pop_back();
          }
          // The TCP handshake and the hello start now, while the worker's
          // thread wakes up (about 0.1 ms on a busy machine).
          auto id = self->state.pending->put(
            start_dial(cfg.secret, host, port, channel::control));
          return self->delegate(worker, atm, std::move(host), port, id);
        },
        [=](dial_idle_atom) {
          auto worker = caf::actor_cast<caf::actor>(self->current_sender());
          if (!worker)
            return;
          if (self->state.idle.size() < max_idle_workers)
            self->state.idle.push_back(std::move(worker));
          else
            self->send_exit(worker, caf::exit_reason::normal);
        },
      };
    });
}

} // namespace dice::net
