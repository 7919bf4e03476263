// Typed events (issue 10, item 3): a user's own type, registered in the
// test's own CAF type-ID block, is emitted with dice::topic<T> and handled as
// `const T&` (DI-engine's task.emit / task.on) on the test coordinator, in an
// in-process cluster on threads and between two nodes over loopback TCP. It
// no longer rides in an empty context_delta: a delta handler on the same
// topic never sees it, and a value no handler of the topic takes is counted.
// Also: middleware cannot be copied, and node_services offers no actor
// system, actor handles or writable report.

#include "dice/actors/role_actor.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/node.hpp"
#include "dice/security/trust.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/meta/type_name.hpp"
#include "caf/scoped_actor.hpp"

#include "support/deterministic.hpp"
#include "support/loopback_node.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace typed_event_test {

/// A user's event type: nothing dice knows about.
struct greeting {
  std::string text;
  std::int32_t n = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, greeting& x) {
  return f(caf::meta::type_name("typed_event_test::greeting"), x.text, x.n);
}

} // namespace typed_event_test

// The user's own block, after dice's.
CAF_BEGIN_TYPE_ID_BLOCK(typed_event_test, caf::id_block::dice::end)

  CAF_ADD_TYPE_ID(typed_event_test, (typed_event_test::greeting))

CAF_END_TYPE_ID_BLOCK(typed_event_test)

namespace {

using namespace std::chrono_literals;
using namespace dice;
using typed_event_test::greeting;

const topic<greeting> greetings{"greetings"};
/// A listener on another node says it is subscribed (its first iteration
/// runs after its join): a greeting emitted before that would be held by the
/// greeter's router, and its finish could end the listener's run before the
/// listener joined.
const topic<greeting> listening{"listening"};

// -- what the API must not offer (compile-time) ------------------------------

template <class T, class = void>
struct has_system : std::false_type {};
template <class T>
struct has_system<T, std::void_t<decltype(std::declval<T&>().system())>>
  : std::true_type {};

template <class T, class = void>
struct has_report : std::false_type {};
template <class T>
struct has_report<T, std::void_t<decltype(std::declval<T&>().report())>>
  : std::true_type {};

template <class T, class = void>
struct has_handle : std::false_type {};
template <class T>
struct has_handle<T, std::void_t<decltype(std::declval<T&>().handle())>>
  : std::true_type {};

template <class T, class = void>
struct has_router_handle : std::false_type {};
template <class T>
struct has_router_handle<
  T, std::void_t<decltype(std::declval<T&>().router_handle())>>
  : std::true_type {};

static_assert(!has_system<node_services>::value,
              "middleware must not reach the actor system");
static_assert(!has_report<node_services>::value,
              "middleware must not write the report directly");
static_assert(!has_handle<node_services>::value
                && !has_router_handle<node_services>::value,
              "middleware must not get raw actor handles");
// Two pipelines sharing one middleware's state would race two actors.
static_assert(!std::is_copy_constructible<middleware>::value
                && !std::is_copy_assignable<middleware>::value,
              "a middleware copy would share its state");
static_assert(std::is_nothrow_move_constructible<middleware>::value);
// (A pipeline holds a vector of them, so copying one does not compile either;
// std::vector's copy constructor is not SFINAE-friendly, so no trait says so.)

// -- pipelines ----------------------------------------------------------------

/// Emits greeting{"hello", i} after iteration i; with `wait_for_listener`,
/// its first iteration first waits until a listener said it listens.
middleware greeter(bool wait_for_listener = false) {
  struct state {
    node_services* svc = nullptr;
    std::int32_t n = 0;
    bool heard_listener = false;
  };
  auto st = std::make_shared<state>();
  middleware m;
  m.name = "greeter";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
    svc.on(listening, [st](const greeting&) {
      st->heard_listener = true;
    });
  };
  if (wait_for_listener)
    m.before = [st](context& ctx) -> step {
      if (ctx.total_step > 0)
        return proceed;
      return wait_for{[st] {
                        return st->heard_listener;
                      },
                      20s,
                      [](context&, wait_outcome) {
                        return proceed;
                      }};
    };
  m.after = [st](context&) {
    st->svc->emit(greetings, greeting{"hello", st->n++});
  };
  return m;
}

/// What a listener saw.
struct heard {
  std::vector<greeting> greetings;
  int deltas = 0;
};

/// Takes greetings (and counts deltas on the same topic name) and waits for
/// `want` of them in its first iteration, then for the finish.
middleware listener(std::shared_ptr<heard> out, std::size_t want) {
  auto svc = std::make_shared<node_services*>(nullptr);
  middleware m;
  m.name = "listener";
  m.attach = [svc, out](node_services& s) {
    *svc = &s;
    s.on(greetings, [out](const greeting& x) {
      out->greetings.push_back(x);
    });
    s.on(topic<context_delta>{greetings.name()}, [out](const context_delta&) {
      ++out->deltas;
    });
  };
  // Iteration k waits for (k + 1) * want: after the first, until the finish.
  m.before = [svc, out, want](context& ctx) -> step {
    auto k = static_cast<std::size_t>(ctx.total_step);
    if (k == 0)
      (*svc)->emit(listening, greeting{"listening", 0});
    return wait_for{[out, want, k] {
                      return out->greetings.size() >= (k + 1) * want;
                    },
                    20s,
                    [](context&, wait_outcome) {
                      return proceed;
                    }};
  };
  return m;
}

pipeline pipe_of(middleware m) {
  pipeline p;
  p.use(std::move(m));
  return p;
}

void expect_greetings(const heard& h, std::int32_t n) {
  ASSERT_EQ(h.greetings.size(), static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    EXPECT_EQ(h.greetings[i].text, "hello");
    EXPECT_EQ(h.greetings[i].n, i);
  }
  EXPECT_EQ(h.deltas, 0) << "a greeting reached a delta handler";
}

// -- deterministic ------------------------------------------------------------

class TypedEvents : public test::deterministic {};

TEST_F(TypedEvents, AUsersTypeReachesItsHandlersOnly) {
  auto router = spawn_router();
  auto out = std::make_shared<heard>();
  auto l = spawn_role(router, 0, {role::learner}, pipe_of(listener(out, 3)));
  auto c = spawn_role(router, 1, {role::collector}, pipe_of(greeter()), 3);
  auto rejected = counter(trust_event::message_rejected);
  start({l, c});
  for (int i = 0; i < 10 && reports().size() < 2; ++i)
    advance(1s);
  expect_greetings(*out, 3);
  EXPECT_EQ(counter(trust_event::message_rejected), rejected);
}

TEST_F(TypedEvents, AValueNoHandlerOfTheTopicTakesIsCounted) {
  auto router = spawn_router();
  auto out = std::make_shared<heard>();
  auto l = spawn_role(router, 0, {role::learner}, pipe_of(listener(out, 1)));
  start({l});
  auto rejected = counter(trust_event::message_rejected);
  // Text on the greetings topic: an event of a type nobody there takes.
  publish(router, greetings.name(), 5,
          event{5, caf::make_message(std::string{"not a greeting"})});
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 1);
  EXPECT_TRUE(out->greetings.empty());
  publish(router, greetings.name(), 5,
          event{5, caf::make_message(greeting{"hi", 7})});
  ASSERT_EQ(out->greetings.size(), 1u);
  EXPECT_EQ(out->greetings[0].n, 7);
  EXPECT_EQ(counter(trust_event::message_rejected), rejected + 1);
}

// -- threads, one process -----------------------------------------------------

struct events_config : caf::actor_system_config {
  events_config() {
    dice::add_message_types(*this);
    add_message_types<caf::id_block::typed_event_test>();
  }
};

TEST(TypedEventsLocal, AUsersTypeCrossesAnInProcessCluster) {
  events_config cfg;
  caf::actor_system sys{cfg};
  auto out = std::make_shared<heard>();
  std::vector<local_node> nodes;
  nodes.push_back(local_node{0, {role::learner}, pipe_of(listener(out, 3)), 0});
  nodes.push_back(local_node{1, {role::collector}, pipe_of(greeter()), 3});
  local_run_options opts;
  opts.print_reports = false;
  opts.deadline = 60s;
  auto reps = run_local(sys, std::move(nodes), opts);
  ASSERT_TRUE(reps) << render(reps.error());
  expect_greetings(*out, 3);
}

// -- two nodes over loopback TCP ----------------------------------------------

struct events_node_config : node_system_config {
  events_node_config() {
    add_message_types<caf::id_block::typed_event_test>();
  }
};

TEST(TypedEventsNet, AUsersTypeCrossesTwoNodesOnLoopback) {
  events_node_config cfg0;
  events_node_config cfg1;
  caf::actor_system sys0{cfg0};
  caf::actor_system sys1{cfg1};
  auto make = [](caf::actor_system& sys, std::uint32_t id, role_set roles,
                 bool listen) {
    return node::start(sys, test::loopback_node_config(id, roles, listen));
  };
  auto server = make(sys0, 0, {role::learner}, true);
  ASSERT_TRUE(server) << render(server.error());
  auto client = make(sys1, 1, {role::collector}, false);
  ASSERT_TRUE(client) << render(client.error());
  {
    caf::scoped_actor self{sys1};
    self->send(client->router(), attach_atom::value, std::string{"127.0.0.1"},
               server->port());
    std::uint32_t peers = 0;
    self->request(client->router(), 10s, peers_atom::value, std::uint32_t{1})
      .receive(
        [&](std::uint32_t x) {
          peers = x;
        },
        [](caf::error&) {});
    ASSERT_EQ(peers, 1u);
  }
  auto out = std::make_shared<heard>();
  node_run_options lopts;
  lopts.print_report = false;
  lopts.deadline = 60s;
  caf::expected<node_report> lrep{caf::error{}};
  std::thread learner{[&] {
    lrep = server->run(pipe_of(listener(out, 3)), lopts);
  }};
  node_run_options copts = lopts;
  copts.max_step = 3;
  auto crep = client->run(pipe_of(greeter(true)), copts);
  learner.join();
  client->stop();
  server->stop();
  ASSERT_TRUE(crep) << render(crep.error());
  ASSERT_TRUE(lrep) << render(lrep.error());
  expect_greetings(*out, 3);
}

} // namespace
