// Forming one generation of a learner's group: rank 0 announces it and
// holds its store; join() blocks on a thread of its own while the role
// actor carries the store's requests and answers over the router.

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include "caf/make_message.hpp"

#include "learner_group_member_state.hpp"

namespace dice {

// Rank 0 holds the generation's store and announces it; the others wait
// for that. Nothing listens but Gloo's pairs, on the cluster address.
step learner_group_member::state::form(context& ctx) {
  if (svc->finished()) {
    ph = phase::gone;
    return proceed;
  }
  auto c = cfg;
  c.secret = opts.secret;
  if (c.rank != 0 && c.size > 1) {
    auto i = hellos.find(c.generation);
    if (i == hellos.end())
      return wait_for{[this] {
                        return hellos.count(cfg.generation) > 0;
                      },
                      opts.join_timeout,
                      [this](context& ctx, wait_outcome out) -> step {
                        if (out == wait_outcome::finished) {
                          ph = phase::gone;
                          return proceed;
                        }
                        if (out == wait_outcome::timed_out) {
                          give_up("no rendezvous from rank 0 within "
                                  "the join timeout");
                          return proceed;
                        }
                        return form(ctx);
                      }};
    if (i->second.size != static_cast<std::uint32_t>(c.size)) {
      give_up("rank 0 forms a group of " + std::to_string(i->second.size)
              + ", this learner expected " + std::to_string(c.size));
      return proceed;
    }
  }
  std::shared_ptr<detail::router_store> store;
  if (c.size > 1) {
    store = std::make_shared<detail::router_store>(c.generation, node(),
                                                   c.rank == 0, c.join_timeout);
    c.store = store;
  }
  auto g = learner_group::create(c);
  if (!g) {
    give_up("cannot create the group: " + render(g.error()));
    return proceed;
  }
  if (c.size == 1) {
    // No network: forms at once.
    if (auto err = g->join()) {
      give_up("cannot form the group: " + render(err));
      return proceed;
    }
    job = std::make_shared<forming_job>();
    job->group.emplace(std::move(*g));
    job->done = true;
    return finish_forming(ctx);
  }
  if (c.rank == 0) {
    detail::rendezvous_hello h;
    h.generation = c.generation;
    h.size = static_cast<std::uint32_t>(c.size);
    if (admitting) {
      h.joiner = admitting->node;
      h.joiner_nonce = admitting->nonce;
    }
    svc->emit(topic<std::string>{learner_group_topic}, to_wire(h));
  }
  job = std::make_shared<forming_job>();
  job->group.emplace(std::move(*g));
  job->store = std::move(store);
  // join() blocks until every rank connected (join_timeout); the role actor
  // meanwhile carries the store's messages.
  job->thread = std::thread{[j = job] {
    j->err = j->group->join();
    j->done = true;
  }};
  return pump(ctx);
}

void learner_group_member::state::flush_outbox() {
  if (!job || !job->store || svc == nullptr)
    return;
  for (auto& text : job->store->take_outbox())
    svc->emit(topic<std::string>{learner_group_alive_topic}, std::move(text));
}

step learner_group_member::state::pump(context& ctx) {
  flush_outbox();
  if (job->done)
    return finish_forming(ctx);
  // The forming thread cannot publish (only the role actor may), and it
  // cannot wake the actor: queued requests wait at most this long.
  constexpr auto poll = std::chrono::milliseconds{2};
  return wait_for{[this] {
                    return !job || job->done || job->store->has_outbox();
                  },
                  poll,
                  [this](context& ctx, wait_outcome out) -> step {
                    if (!job)
                      return proceed;
                    if (out == wait_outcome::finished) {
                      stop_forming();
                      ph = phase::gone;
                      return proceed;
                    }
                    return pump(ctx);
                  }};
}

void learner_group_member::state::stop_forming() {
  if (!job)
    return;
  auto j = std::move(job);
  job.reset();
  if (j->store)
    j->store->close(); // its waiting calls fail at once
  if (j->group)
    j->group->abort();
  if (j->thread.joinable())
    j->thread.join();
}

step learner_group_member::state::finish_forming(context& ctx) {
  auto j = std::move(job);
  job.reset();
  if (j->thread.joinable())
    j->thread.join();
  if (j->store) {
    if (auto n = j->store->refused(); n > 0)
      log::warning(node(),
                   who() + ": the rendezvous refused " + std::to_string(n)
                     + " requests");
    j->store->close();
  }
  if (j->err) {
    give_up("cannot form the group: " + render(j->err));
    return proceed;
  }
  group.emplace(std::move(*j->group));
  ph = phase::formed;
  // Every rank left the previous generation (all reached this one).
  retired.reset();
  admitting.reset();
  if (auto err = after_formed(ctx)) {
    ph = phase::formed;
    fail(err);
    return proceed;
  }
  std::string ids;
  for (auto m : members)
    ids += (ids.empty() ? "" : ", ") + std::to_string(m);
  log::info(node(),
            who() + " formed (" + to_string(cfg.mode) + " all-reduce; nodes "
              + ids + (opts.secret.empty() ? "" : "; pairs proved membership")
              + ")");
  return proceed;
}

} // namespace dice
