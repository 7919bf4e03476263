#pragma once

// Internal: the state of one learner's membership in its group, shared by
// learner_group_member.cpp (forming, failure, re-forming, the API) and
// learner_group_member_join.cpp (a restarted learner's join, rank 0 lost).

#include "dice/logging/sampler.hpp"
#include "dice/messages/detail/learner_group_hello.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/torch/learner_group_member.hpp"

#include "learner_group_router_store.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dice {

struct learner_group_member::state {
  enum class phase { joining, forming, formed, failed, gone };

  // A generation being formed: `join()` blocks on its own thread while the
  // role actor carries the rendezvous (its store's requests and replies).
  struct forming_job {
    std::optional<learner_group> group;
    std::shared_ptr<detail::router_store> store;
    std::atomic<bool> done{false};
    caf::error err; // written before `done`
    std::thread thread;
  };

  learner_group_member_options opts;
  learner_group_member* owner = nullptr;
  node_services* svc = nullptr;
  phase ph = phase::forming;
  // Config of the generation being formed or formed.
  learner_group_config cfg;
  std::optional<learner_group> group;
  // slot (collector id mod the number of slots: the first size, then the
  // size after the last join) -> rank owning it now.
  std::vector<int> slot_owner;
  // Rank 0's rendezvous announcements heard, by generation.
  std::map<std::uint64_t, detail::rendezvous_hello> hellos;
  // The generation forming now (null when none).
  std::shared_ptr<forming_job> job;
  // Malformed texts on the group's topics: counted, logged sampled.
  std::uint64_t malformed = 0;
  log::sampler refusals;
  // Survivors heard, by failed generation.
  std::map<std::uint64_t, std::set<int>> alive;
  std::shared_ptr<context_partition> partition;
  // The group's totals, and what ctx held when they were set: ctx minus
  // that is this rank's part not yet counted.
  std::int64_t env_step = 0;
  std::int64_t env_episode = 0;
  std::int64_t set_env_step = 0;
  std::int64_t set_env_episode = 0;
  // Per collector, (incarnation, seq) up to which the group counted its deltas,
  // as of the last sync this rank completed.
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> counted;
  // Node id of each rank of the current generation (gathered on forming).
  std::vector<std::uint32_t> members;
  // This incarnation's nonce (a restarted learner's join request).
  std::uint64_t nonce = 0;
  // A restarted learner: the hello that admits it, once heard.
  std::optional<detail::rendezvous_hello> welcome;
  // When this learner started asking to join.
  std::chrono::steady_clock::time_point join_since;
  // Join requests heard (node -> nonce), and the nonces already admitted.
  std::map<std::uint32_t, std::uint64_t> join_requests;
  std::set<std::uint64_t> admitted;
  // Rank 0 of a generation that admits a joiner: whom its hello names.
  std::optional<learner_group_join> admitting;
  // The previous generation after a join: every rank has finished its last
  // collective only once all reached the next generation's store, so its
  // connections are closed then (closing at once could cut a peer's last
  // receive short).
  std::optional<learner_group> retired;
  // Rank 0 was lost; this survivor writes the checkpoint to resume from.
  bool rank_zero_lost = false;
  bool writes_last_checkpoint = false;
  // Learner nodes the router lost, and those it has now.
  std::set<std::uint32_t> lost_nodes;
  std::set<std::uint32_t> learner_peers;
  // This generation admitted this learner (it has no state of its own).
  bool ph_joined = false;

  std::uint32_t node() const {
    return svc != nullptr ? svc->node_id() : 0;
  }

  std::string who() const {
    return "learner group (generation " + std::to_string(cfg.generation)
      + ", rank " + std::to_string(cfg.rank) + " of " + std::to_string(cfg.size)
      + ")";
  }

  void give_up(const std::string& why);

  void fail(const caf::error& err);

  void on_hello(const std::string& text);

  void on_alive(const std::string& text);

  // A collector's (incarnation, seq) as three doubles, exact below 2^53 each.
  static void put_mark(double* x, std::uint64_t incarnation,
                       std::uint64_t upto) {
    x[0] = static_cast<double>(upto);
    x[1] = static_cast<double>(incarnation >> 32);
    x[2] = static_cast<double>(incarnation & 0xFFFFFFFFu);
  }

  static std::pair<std::uint64_t, std::uint64_t> get_mark(const double* x) {
    return {(static_cast<std::uint64_t>(x[1]) << 32)
              | static_cast<std::uint64_t>(x[2]),
            static_cast<std::uint64_t>(x[0])};
  }

  bool slot_is_mine(std::uint32_t c) const {
    return !slot_owner.empty() && slot_owner[c % slot_owner.size()] == cfg.rank;
  }

  // A joiner owns nothing until it knows where the group counted.
  bool owns_slot(std::uint32_t c) const {
    return ph != phase::joining && !ph_joined && slot_is_mine(c);
  }

  // After a sync that admitted `joiner` (the same on every rank, right after
  // the group counted everything applied so far; nothing else was applied
  // since): the partition becomes collector id mod the new size, a
  // collector that changes hands starts at the seq the group counted (its
  // new owner settles up to there, its old owner ignores it from now on),
  // and the group re-forms one larger with the joiner as the last rank.
  void admit(std::uint32_t joiner);

  // The join request rank 0 puts into this sync: node id + 1 (0: none).
  double join_offer() const;

  // A restarted learner asks the running group to admit it (again every
  // second until rank 0's hello names it, at most `join_timeout`).
  step ask_to_join(context&);

  // Rank 0 alone publishes models: without it the survivors stop the run,
  // and the lowest (`writer`) writes the checkpoint to resume from.
  void lose_rank_zero(bool writer);

  // The router lost a peer. Rank 0's loss is final at once: the collectors
  // wait for its models, so a survivor waiting for their data would not
  // reach a collective that fails for a minute.
  void on_peer(const peer_event& ev);

  // Rank `root`'s counters, then the application's state.
  // A joiner's state is the oldest: it never becomes the root.
  caf::error after_formed(context& ctx);

  // Rank 0 opens the store and tells the others; the others wait for that.
  step form(context& ctx);

  // While `job` forms: publishes its store's requests and answers, and
  // goes on once its join() returned.
  step pump(context& ctx);

  // `job` ended: the group is formed (or forming failed).
  step finish_forming(context& ctx);

  // Ends a forming in progress (its store closes, its thread is joined).
  void stop_forming();

  // Publishes what the forming store queued.
  void flush_outbox();

  // A malformed text on one of the group's topics: counted, logged sampled.
  void refuse(const char* what);

  // Survivors announce themselves, then form generation + 1 without the
  // learners not heard from within the window.
  step reform(context&);

  step before(context& ctx);
};

} // namespace dice
