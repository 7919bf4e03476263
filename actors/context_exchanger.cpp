#include "dice/actors/context_exchanger.hpp"

#include <map>
#include <memory>

#include "dice/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/trust.hpp"

#include "loader_bridge.hpp"

#include "caf/make_message.hpp"

namespace dice {

std::string context_topic(role r) {
  return std::string{"context_exchanger_"} + to_string(r);
}

namespace {

// DI-engine's `_state`: what arrived since the last merge. The role actor is
// single-threaded, so unlike DI-engine nothing can arrive between reading
// and resetting it.
struct inbox {
  bool any = false;
  std::optional<std::int64_t> env_step;
  std::optional<std::int64_t> env_episode;
  std::optional<std::int64_t> train_iter;
  std::optional<std::vector<payload>> trajectories;
  std::optional<std::vector<payload>> episodes;
  std::optional<std::vector<std::int64_t>> trajectory_end_idx;
};

struct exchanger_state {
  context_exchanger_options opts;
  node_services* svc = nullptr;
  role_set roles;
  bool active = false;
  inbox box;
  // What a collector sent last, to compute increments (DI-engine's
  // `_local_state`).
  std::int64_t sent_env_step = 0;
  std::int64_t sent_env_episode = 0;
  std::uint64_t seq = 0;
  detail::role_handles handles;
  // Exactly-once: the highest seq applied per (sender, epoch). BASP keeps
  // one connection's order, so anything at or below it is a resend or a
  // replay. Bounded: a peer inventing epochs only evicts old entries.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> applied;

  // True if `d` was applied before; seq 0 marks an unsequenced delta.
  bool duplicate(const context_delta& d) {
    if (d.seq == 0)
      return false;
    auto key = std::make_pair(d.sender, d.epoch);
    auto i = applied.find(key);
    if (i != applied.end() && d.seq <= i->second)
      return true;
    if (i == applied.end() && applied.size() >= 4096)
      applied.erase(applied.begin());
    applied[key] = d.seq;
    return false;
  }

  bool has(role r) const {
    return roles.has(r);
  }

  // DI-engine's `put`: each field goes to the roles the spec table names.
  void put(const context_delta& d) {
    if (duplicate(d)) {
      count(trust_event::duplicate_dropped);
      log::debug(svc->node_id(), "dropped duplicate delta "
                                   + std::to_string(d.seq) + " from node "
                                   + std::to_string(d.sender));
      return;
    }
    ++svc->report().deltas_received;
    if (d.env_step && !has(role::collector)) {
      box.env_step = box.env_step.value_or(0) + *d.env_step;
      box.any = true;
    }
    if (d.env_episode && !has(role::collector)) {
      box.env_episode = box.env_episode.value_or(0) + *d.env_episode;
      box.any = true;
    }
    if (d.train_iter && !has(role::learner)) {
      box.train_iter = *d.train_iter;
      box.any = true;
    }
    if (!has(role::learner))
      return;
    // Offsets keep each sender's trajectory_end_idx pointing into the merged
    // list (DI-engine extends them unchanged, which breaks GAE with several
    // collectors).
    auto offset = static_cast<std::int64_t>(
      box.trajectories ? item_count(*box.trajectories) : 0);
    if (!d.trajectories.empty()) {
      auto& xs = box.trajectories ? *box.trajectories
                                  : box.trajectories.emplace();
      xs.insert(xs.end(), d.trajectories.begin(), d.trajectories.end());
      svc->report().trajectories_received
        += static_cast<std::int64_t>(item_count(d.trajectories));
      box.any = true;
    }
    if (!d.episodes.empty()) {
      auto& xs = box.episodes ? *box.episodes : box.episodes.emplace();
      xs.insert(xs.end(), d.episodes.begin(), d.episodes.end());
      box.any = true;
    }
    if (d.has_trajectory_end_idx) {
      auto& xs = box.trajectory_end_idx ? *box.trajectory_end_idx
                                        : box.trajectory_end_idx.emplace();
      for (auto idx : d.trajectory_end_idx)
        xs.push_back(idx + offset);
      box.any = true;
    }
  }

  // DI-engine's `merge`: increments add up on non-collectors, everything
  // else overwrites.
  void merge(context& ctx) {
    if (box.env_step)
      ctx.env_step += *box.env_step;
    if (box.env_episode)
      ctx.env_episode += *box.env_episode;
    if (box.train_iter)
      ctx.train_iter = *box.train_iter;
    if (box.trajectories)
      ctx.trajectories = std::move(*box.trajectories);
    if (box.episodes)
      ctx.episodes = std::move(*box.episodes);
    if (box.trajectory_end_idx)
      ctx.trajectory_end_idx = std::move(*box.trajectory_end_idx);
    box = inbox{};
  }

  step wait_for_context(caf::timespan timeout) {
    auto resume = [this](context& ctx, wait_outcome outcome) -> step {
      if (outcome == wait_outcome::timed_out)
        log::warning(svc->node_id(),
                     "Timeout when waiting for new context! Node id: "
                       + std::to_string(svc->node_id()));
      merge(ctx);
      return proceed;
    };
    return wait_for{[this] { return box.any; }, timeout, resume};
  }

  step before(context& ctx) {
    if (!active)
      return proceed;
    if (has(role::learner)) {
      // The learner always waits for data, but (unlike DI-engine) only up to
      // a deadline and never past finish.
      if (!box.any && !svc->finished())
        return wait_for_context(opts.learner_timeout);
    } else if (ctx.total_step >= opts.skip_n_iter && !box.any
               && !svc->finished()) {
      return wait_for_context(opts.timeout);
    }
    merge(ctx);
    return proceed;
  }

  // DI-engine's `fetch`: which fields a sender's roles contribute.
  void after(context& ctx) {
    if (!active)
      return;
    context_delta d;
    if (has(role::collector)) {
      d.env_step = ctx.env_step - sent_env_step;
      sent_env_step = ctx.env_step;
      d.env_episode = ctx.env_episode - sent_env_episode;
      sent_env_episode = ctx.env_episode;
      d.trajectories = ctx.trajectories;
      d.episodes = ctx.episodes;
      d.trajectory_end_idx = ctx.trajectory_end_idx;
      d.has_trajectory_end_idx = true;
    }
    if (has(role::learner))
      d.train_iter = ctx.train_iter;
    if (empty(d))
      return;
    d.sender = svc->node_id();
    d.epoch = svc->epoch();
    d.seq = ++seq;
    d.sender_roles = roles;
    d.model_version = ctx.model_version;
    if (opts.storage_loader && handles.bus && has(role::collector)) {
      // DI-engine's `storage_loader.save(payload)`, off this actor: the
      // loader stores the delta and publishes the reference per topic.
      std::vector<std::string> topics;
      for (auto r : all_roles)
        if (has(r))
          topics.push_back(context_topic(r));
      caf::anon_send(opts.storage_loader, save_atom::value, std::move(d),
                     handles.bus, std::move(topics));
      return;
    }
    for (auto r : all_roles) {
      if (!has(r))
        continue;
      auto topic = context_topic(r);
      svc->publish(topic, caf::make_message(topic, d));
    }
  }
};

} // namespace

middleware context_exchanger(context_exchanger_options opts) {
  auto st = std::make_shared<exchanger_state>();
  st->opts = opts;
  middleware result;
  result.name = "context_exchanger";
  result.attach = [st](node_services& svc) {
    st->svc = &svc;
    st->roles = svc.roles();
    if (st->roles.empty()) {
      log::warning(svc.node_id(), "The task does not have any roles defined, "
                                  "the ContextExchanger will not work.");
      return;
    }
    if (st->roles.size() > 1)
      log::warning(svc.node_id(),
                   "Use multiple roles in one exchanger may lead to "
                   "unexpected result, please check your code.");
    st->active = true;
    st->handles = detail::handles_of(svc);
    if (st->opts.storage_loader)
      svc.flush_before_done(caf::actor_cast<caf::actor>(st->opts.storage_loader));
    // Subscribe to every role this node does not have.
    for (auto r : all_roles) {
      if (st->has(r))
        continue;
      svc.subscribe(context_topic(r), [st](const caf::type_erased_tuple& msg) {
        if (msg.match_elements<std::string, context_delta>())
          st->put(msg.get_as<context_delta>(1));
        else
          detail::forward_storage_ref(*st->svc, st->opts.storage_loader,
                                      st->handles.self, msg);
      });
    }
  };
  result.before = [st](context& ctx) { return st->before(ctx); };
  result.after = [st](context& ctx) { st->after(ctx); };
  // Whatever arrived after the last merge still counts: a learner's final
  // env_step equals the sum of what its collectors sent.
  result.on_stop = [st](context& ctx) {
    if (st->active && st->box.any)
      st->merge(ctx);
    // DI-engine: shutdown on task.once("finish").
    if (st->opts.storage_loader)
      caf::anon_send_exit(st->opts.storage_loader,
                          caf::exit_reason::user_shutdown);
  };
  return result;
}

} // namespace dice
