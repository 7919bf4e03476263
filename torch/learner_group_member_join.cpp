#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include "caf/make_message.hpp"

#include "learner_group_member_state.hpp"

#include <algorithm>

namespace dice {

void learner_group_member::state::on_alive(const std::string& text) {
  // The forming generation's rendezvous (requests and answers).
  if (job && job->store ? job->store->on_text(text)
                        : detail::parse_store_request(text)
          || detail::parse_store_reply(text)) {
    flush_outbox(); // rank 0 answers at once
    return;
  }
  if (auto j = parse_learner_group_join(text)) {
    if (j->node == node() || admitted.count(j->nonce) > 0)
      return;
    auto fresh = join_requests.insert_or_assign(j->node, j->nonce).second;
    if (fresh && cfg.rank == 0)
      log::info(node(),
                who() + ": node " + std::to_string(j->node) + " asks to join");
    return;
  }
  auto x = parse_learner_group_alive(text);
  if (!x) {
    refuse("alive");
    return;
  }
  alive[x->generation].insert(static_cast<int>(x->rank));
  // A peer's step failed: this rank's group is broken too, even if this
  // rank has not called a collective since; join the re-formation.
  if (x->generation == cfg.generation && ph == phase::formed
      && static_cast<int>(x->rank) != cfg.rank)
    fail(make_error(errc::unreachable,
                    "rank " + std::to_string(x->rank)
                      + " reported a failed step"));
}

// After a sync that admitted `joiner` (the same on every rank, right after
// the group counted everything applied so far; nothing else was applied
// since): the partition becomes collector id mod the new size, a
// collector that changes hands starts at the seq the group counted (its
// new owner settles up to there, its old owner ignores it from now on),
// and the group re-forms one larger with the joiner as the last rank.
void learner_group_member::state::admit(std::uint32_t joiner) {
  auto size = cfg.size + 1;
  std::vector<int> table;
  for (int s = 0; s < size; ++s)
    table.push_back(s);
  for (auto& [c, w] : counted) {
    bool before = owns_slot(c);
    bool after = table[c % table.size()] == cfg.rank;
    if (!before && after && partition->settle)
      partition->settle(c, w.first, w.second);
  }
  slot_owner = std::move(table);
  log::warning(node(),
               who() + ": admitting node " + std::to_string(joiner)
                 + " as rank " + std::to_string(cfg.size) + "; re-forming with "
                 + std::to_string(size) + " learners as generation "
                 + std::to_string(cfg.generation + 1));
  if (cfg.rank == 0) {
    auto i = join_requests.find(joiner);
    admitting = learner_group_join{joiner,
                                   i != join_requests.end() ? i->second : 0};
    admitted.insert(admitting->nonce);
  }
  join_requests.erase(joiner);
  retired = std::move(group);
  group.reset();
  cfg.generation += 1;
  cfg.size = size;
  ph = phase::forming;
}

// The join request rank 0 puts into this sync: node id + 1 (0: none).
double learner_group_member::state::join_offer() const {
  if (cfg.rank != 0)
    return 0;
  // Only a learner this node's router has now: a join naming another node (a
  // collector, a dead one) would leave the group waiting to form.
  for (auto& [n, nonce] : join_requests)
    if (std::find(members.begin(), members.end(), n) == members.end()
        && learner_peers.count(n) > 0)
      return static_cast<double>(n) + 1;
  return 0;
}

// A restarted learner asks the running group to admit it (again every
// second until rank 0's hello names it, at most `join_timeout`).
step learner_group_member::state::ask_to_join(context&) {
  learner_group_join j{node(), nonce};
  svc->emit(topic<std::string>{learner_group_alive_topic}, to_wire(j));
  return wait_for{
    [this] {
      return welcome.has_value() || svc->finished();
    },
    std::chrono::seconds{1},
    [this](context& ctx, wait_outcome) -> step {
      if (svc->finished()) {
        ph = phase::gone;
        return proceed;
      }
      if (!welcome) {
        if (std::chrono::steady_clock::now() - join_since > opts.join_timeout) {
          give_up("no learner group admitted this restarted learner "
                  "within the join timeout");
          return proceed;
        }
        return ask_to_join(ctx);
      }
      cfg.generation = welcome->generation;
      cfg.size = static_cast<int>(welcome->size);
      cfg.rank = cfg.size - 1;
      slot_owner.clear();
      for (int s = 0; s < cfg.size; ++s)
        slot_owner.push_back(s);
      ph_joined = true;
      ph = phase::forming;
      log::info(node(), who() + ": admitted by the running group");
      return form(ctx);
    }};
}

// Rank 0 alone publishes models: without it the survivors stop the run,
// and the lowest (`writer`) writes the checkpoint to resume from.
void learner_group_member::state::lose_rank_zero(bool writer) {
  if (ph == phase::gone)
    return;
  rank_zero_lost = true;
  writes_last_checkpoint = writer;
  give_up("rank 0, the learner that publishes models, was lost; the "
          "group cannot go on without it: the run stops"
          + std::string{writer ? " and this learner writes the checkpoint "
                                 "to resume from"
                               : ""});
}

// The router lost a peer. Rank 0's loss is final at once: the collectors
// wait for its models, so a survivor waiting for their data would not
// reach a collective that fails for a minute.
void learner_group_member::state::on_peer(const peer_event& ev) {
  if (!ev.roles.has(role::learner))
    return;
  if (ev.up) {
    lost_nodes.erase(ev.node);
    learner_peers.insert(ev.node);
    return;
  }
  lost_nodes.insert(ev.node);
  learner_peers.erase(ev.node);
  // Once the run finished, peers leave as it ends.
  if (svc == nullptr || svc->finished() || ph == phase::gone
      || ph == phase::joining || members.empty() || cfg.rank == 0
      || ev.node != members.front())
    return;
  // The lowest rank whose node the router still has writes the checkpoint.
  int writer = -1;
  for (std::size_t r = 1; r < members.size() && writer < 0; ++r)
    if (lost_nodes.count(members[r]) == 0)
      writer = static_cast<int>(r);
  lose_rank_zero(writer == cfg.rank);
}

} // namespace dice
