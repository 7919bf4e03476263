#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include "caf/make_message.hpp"

#include "learner_group_member_state.hpp"

#include <algorithm>
#include <random>

namespace dice {

void learner_group_member::state::give_up(const std::string& why) {
  if (ph == phase::gone)
    return;
  log::error(node(), who() + ": " + why);
  ph = phase::gone;
  stop_forming();
  if (group)
    group->abort();
  group.reset();
  retired.reset();
  if (svc != nullptr && !svc->finished())
    svc->request_finish("error: " + why);
}

void learner_group_member::state::fail(const caf::error& err) {
  if (ph != phase::formed)
    return;
  log::error(node(),
             who() + ": step failed: " + render(err)
               + "; re-forming without the learners lost");
  if (group)
    group->abort();
  group.reset();
  ph = phase::failed;
}

void learner_group_member::state::refuse(const char* what) {
  ++malformed;
  if (auto n = refusals.next(what))
    log::warning(node(),
                 std::string{"ignored a malformed learner group "} + what
                   + log::sampled_note(n));
}

void learner_group_member::state::on_hello(const std::string& text) {
  auto x = detail::parse_rendezvous_hello(text);
  if (!x) {
    refuse("rendezvous");
    return;
  }
  if (ph == phase::joining && x->joiner && *x->joiner == node()
      && x->joiner_nonce == nonce)
    welcome = *x;
  hellos[x->generation] = *x;
}

// Rank `root`'s counters, then the application's state.
// A joiner's state is the oldest: it never becomes the root.
caf::error learner_group_member::state::after_formed(context& ctx) {
  auto& g = *group;
  bool joined = ph_joined;
  if (g.size() == 1) {
    members = {node()};
    return {};
  }
  auto ids = g.all_gather(static_cast<std::int64_t>(node()));
  if (!ids)
    return ids.error();
  members.assign(ids->begin(), ids->end());
  auto steps = g.all_gather(joined              ? std::int64_t{-1}
                              : owner->progress ? owner->progress()
                                                : 0);
  if (!steps)
    return steps.error();
  auto root = static_cast<int>(std::max_element(steps->begin(), steps->end())
                               - steps->begin());
  // The root's totals and, for a joiner, how far the group counted each
  // collector's stream (a collector it takes over starts there).
  auto n = static_cast<std::size_t>(opts.max_nodes);
  std::vector<double> counters(2 + 3 * n, 0.0);
  if (g.rank() == root) {
    counters[0] = static_cast<double>(env_step);
    counters[1] = static_cast<double>(env_episode);
    for (auto& [c, w] : counted)
      if (c < n)
        put_mark(&counters[2 + 3 * c], w.first, w.second);
  }
  if (auto err = g.all_reduce_sum(counters))
    return err;
  if (joined) {
    counted.clear();
    for (std::uint32_t c = 0; c < n; ++c)
      if (auto w = get_mark(&counters[2 + 3 * c]); w.second > 0) {
        counted[c] = w;
        if (slot_is_mine(c) && partition->settle)
          partition->settle(c, w.first, w.second);
      }
    ph_joined = false;
  }
  // Keep this rank's uncounted part on top of the root's totals.
  auto own_steps = ctx.env_step - set_env_step;
  auto own_episodes = ctx.env_episode - set_env_episode;
  env_step = static_cast<std::int64_t>(counters[0]);
  env_episode = static_cast<std::int64_t>(counters[1]);
  set_env_step = env_step;
  set_env_episode = env_episode;
  ctx.env_step = env_step + own_steps;
  ctx.env_episode = env_episode + own_episodes;
  if (owner->sync_state)
    return owner->sync_state(g, root, ctx);
  return {};
}

// Survivors announce themselves, then form generation + 1 without the
// learners not heard from within the window.
step learner_group_member::state::reform(context&) {
  auto gen = cfg.generation;
  alive[gen].insert(cfg.rank);
  learner_group_alive a{gen, static_cast<std::uint32_t>(cfg.rank)};
  svc->emit(topic<std::string>{learner_group_alive_topic}, to_wire(a));
  return wait_for{
    [this, gen] {
      return svc->finished()
        || alive[gen].size() >= static_cast<std::size_t>(cfg.size);
    },
    opts.reform_window,
    [this, gen](context& ctx, wait_outcome) -> step {
      if (svc->finished()) {
        // The other learners stopped because the run is over.
        ph = phase::gone;
        return proceed;
      }
      std::vector<int> survivors;
      for (auto r : alive[gen])
        if (r >= 0 && r < cfg.size)
          survivors.push_back(r);
      if (std::find(survivors.begin(), survivors.end(), 0) == survivors.end()) {
        lose_rank_zero(!survivors.empty()
                       && *std::min_element(survivors.begin(), survivors.end())
                         == cfg.rank);
        return proceed;
      }
      auto next = learner_group::next_generation(cfg, survivors);
      if (!next) {
        give_up("cannot re-form: " + render(next.error()));
        return proceed;
      }
      std::sort(survivors.begin(), survivors.end());
      std::vector<bool> owned_before;
      for (auto o : slot_owner)
        owned_before.push_back(o == cfg.rank);
      // Survivors keep their slots; a lost learner's slots go to the
      // survivors by slot mod survivors.
      for (std::size_t s = 0; s < slot_owner.size(); ++s) {
        auto it = std::find(survivors.begin(), survivors.end(), slot_owner[s]);
        slot_owner[s] = it != survivors.end()
          ? static_cast<int>(it - survivors.begin())
          : static_cast<int>(s % survivors.size());
      }
      // Collectors this learner takes over: what the group counted of
      // them is settled here, so their resends are not counted twice.
      auto new_rank = static_cast<int>(
        std::find(survivors.begin(), survivors.end(), cfg.rank)
        - survivors.begin());
      for (auto& [c, w] : counted) {
        auto slot = c % slot_owner.size();
        if (!owned_before[slot] && slot_owner[slot] == new_rank
            && partition->settle)
          partition->settle(c, w.first, w.second);
      }
      log::warning(
        node(),
        who() + ": re-forming with " + std::to_string(survivors.size())
          + " learners as generation " + std::to_string(next->generation));
      next->address = opts.address;
      cfg = *next;
      ph = phase::forming;
      return form(ctx);
    }};
}

step learner_group_member::state::before(context& ctx) {
  switch (ph) {
    case phase::joining:
      join_since = std::chrono::steady_clock::now();
      return ask_to_join(ctx);
    case phase::forming: return form(ctx);
    case phase::failed: return reform(ctx);
    default: return proceed;
  }
}

learner_group_member::learner_group_member(learner_group_member_options opts)
  : st_(std::make_shared<state>()) {
  st_->owner = this;
  st_->opts = opts;
  st_->cfg.rank = opts.rank;
  st_->cfg.size = std::max(opts.size, 1);
  st_->cfg.address = opts.address;
  st_->cfg.join_timeout = opts.join_timeout;
  st_->cfg.timeout = opts.timeout;
  st_->cfg.mode = opts.mode;
  for (int s = 0; s < st_->cfg.size; ++s)
    st_->slot_owner.push_back(s);
  if (opts.rejoin) {
    st_->ph = state::phase::joining;
    std::random_device rd;
    st_->nonce = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  }
  st_->partition = std::make_shared<context_partition>();
  st_->partition->defer_acks = true;
  std::weak_ptr<state> weak = st_;
  st_->partition->owns = [weak](std::uint32_t collector) {
    auto s = weak.lock();
    return !s || s->owns_slot(collector);
  };
}

learner_group_member::~learner_group_member() {
  leave();
  st_->owner = nullptr;
}

middleware learner_group_member::make_middleware() {
  auto st = st_;
  middleware m;
  m.name = "learner_group";
  m.attach = [st](node_services& svc) {
    st->svc = &svc;
    svc.on(topic<std::string>{learner_group_topic}, [st](const std::string& x) {
      st->on_hello(x);
    });
    svc.on(topic<std::string>{learner_group_alive_topic},
           [st](const std::string& x) {
             st->on_alive(x);
           });
    svc.on_peer_event([st](const peer_event& ev) {
      st->on_peer(ev);
    });
  };
  m.before = [st](context& ctx) {
    return st->before(ctx);
  };
  return m;
}

std::shared_ptr<context_partition> learner_group_member::partition() const {
  return st_->partition;
}

learner_group* learner_group_member::group() {
  if (st_->ph != state::phase::formed || !st_->group)
    return nullptr;
  return &*st_->group;
}

int learner_group_member::rank() const {
  return st_->cfg.rank;
}

int learner_group_member::size() const {
  return st_->cfg.size;
}

std::uint64_t learner_group_member::generation() const {
  return st_->cfg.generation;
}

bool learner_group_member::owns(std::uint32_t collector) const {
  return st_->partition->owns(collector);
}

caf::expected<bool> learner_group_member::sync(context& ctx,
                                               std::vector<double>& extra,
                                               bool stop) {
  auto* g = group();
  if (g == nullptr)
    return make_error(errc::unreachable, "the learner group is not formed");
  auto& s = *st_;
  std::vector<double> xs{
    static_cast<double>(ctx.env_step - s.set_env_step),
    static_cast<double>(ctx.env_episode - s.set_env_episode), stop ? 1.0 : 0.0,
    s.join_offer()};
  xs.insert(xs.end(), extra.begin(), extra.end());
  auto marks = xs.size();
  auto n = static_cast<std::uint32_t>(s.opts.max_nodes);
  xs.resize(marks + 3 * static_cast<std::size_t>(n), 0.0);
  if (s.partition->watermark)
    for (std::uint32_t c = 0; c < n; ++c) {
      if (!owns(c))
        continue;
      auto [incarnation, upto] = s.partition->watermark(c);
      auto* x = &xs[marks + 3 * c];
      x[0] = static_cast<double>(upto);
      x[1] = static_cast<double>(incarnation >> 32);
      x[2] = static_cast<double>(incarnation & 0xFFFFFFFFu);
    }
  if (auto err = g->all_reduce_sum(xs)) {
    fail(err);
    return err;
  }
  for (std::uint32_t c = 0; c < n; ++c)
    if (auto w = state::get_mark(&xs[marks + 3 * c]); w.second > 0)
      s.counted[c] = w;
  xs.resize(marks);
  // Counted by the group: the collectors may forget these deltas now.
  if (s.partition->ack_now)
    s.partition->ack_now();
  s.env_step += static_cast<std::int64_t>(xs[0]);
  s.env_episode += static_cast<std::int64_t>(xs[1]);
  ctx.env_step = s.set_env_step = s.env_step;
  ctx.env_episode = s.set_env_episode = s.env_episode;
  std::copy(xs.begin() + 4, xs.end(), extra.begin());
  bool stopping = xs[2] > 0;
  // Rank 0 offered a restarted learner's join: every rank re-forms before
  // its next iteration (a stop wins; the joiner keeps asking meanwhile).
  if (!stopping && xs[3] > 0)
    s.admit(static_cast<std::uint32_t>(xs[3]) - 1);
  return stopping;
}

void learner_group_member::fail(const caf::error& err) {
  st_->fail(err);
}

bool learner_group_member::rank_zero_lost() const {
  return st_->rank_zero_lost;
}

bool learner_group_member::writes_last_checkpoint() const {
  return st_->rank_zero_lost ? st_->writes_last_checkpoint : st_->cfg.rank == 0;
}

void learner_group_member::leave() {
  st_->stop_forming();
  if (st_->group)
    st_->group->abort();
  st_->group.reset();
  st_->retired.reset();
  st_->ph = state::phase::gone;
}

} // namespace dice
