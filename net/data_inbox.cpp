#include "data_inbox.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/type_ids.hpp"
#include "net/data_plane.hpp"

#include "caf/event_based_actor.hpp"
#include "caf/response_promise.hpp"
#include "caf/stateful_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dice::net {

namespace {

struct ready_bytes {
  shared_bytes bytes;
  std::shared_ptr<data_budget> budget;
};

struct peer_inbox {
  std::uint64_t link_gen = 0;
  bool up = false;
  // Highest transfer id received whole (ids only grow per sender).
  std::uint64_t highest = 0;
  std::shared_ptr<data_budget> budget;
  // Open claims and when each times out (whole bytes nobody waits for are
  // in the data_ready_table).
  std::map<std::uint64_t,
           std::pair<caf::response_promise, caf::actor_clock::time_point>>
    waiters;
  // Claims that timed out: their bytes are discarded when they arrive.
  std::set<std::uint64_t> abandoned;
  // Relay rounds: tagged bytes by tag (the first of a tag wins), and the
  // highest tag settled (anything tagged up to it is dropped on arrival).
  std::map<std::uint32_t, ready_bytes> tagged;
  std::uint32_t tag_done = 0;
};

// A claim of relay round `tag`: the first bytes so tagged from `via` or
// from `origin`.
struct tag_claim {
  std::uint64_t key = 0;
  std::uint32_t via = 0;
  std::uint32_t origin = 0;
  std::uint32_t tag = 0;
  caf::response_promise rp;
};

struct inbox_state {
  std::uint32_t node = 0;
  caf::timespan timeout{0};
  std::map<std::uint32_t, peer_inbox> peers;
  std::vector<tag_claim> tag_claims;
  std::uint64_t next_key = 0;
  std::shared_ptr<data_ready_table> ready;
  // Gets the headers of transfers that came with one (arrived_atom).
  caf::actor_addr router;
  // A (data_expire) is on its way: claims share one timer instead of
  // waking CAF's clock thread each (a claim waits in most rounds whose
  // reference overtook its bytes).
  bool sweep_armed = false;
  static inline const char* name = "dice.data_inbox";
};

caf::behavior data_inbox(caf::stateful_actor<inbox_state>* self,
                         std::uint32_t node, caf::timespan timeout,
                         std::shared_ptr<data_ready_table> ready) {
  self->state.node = node;
  self->state.timeout = timeout;
  self->state.ready = std::move(ready);
  auto fail_waiters = [=](peer_inbox& p, const std::string& why) {
    for (auto& [id, w] : p.waiters)
      w.first.deliver(make_error(
        errc::unreachable, "transfer " + std::to_string(id) + ": " + why));
    p.waiters.clear();
  };
  auto arm_sweep = [=](caf::timespan after) {
    if (self->state.sweep_armed)
      return;
    self->state.sweep_armed = true;
    self->delayed_send(self, after, data_expire_atom::value);
  };
  // A relay claim waits for its origin's direct fallback whatever happens
  // to `via`; it fails only when the origin itself is gone.
  auto fail_tag_claims = [=](std::uint32_t origin, const std::string& why) {
    auto& cs = self->state.tag_claims;
    for (auto& c : cs)
      if (c.origin == origin)
        c.rp.deliver(
          make_error(errc::unreachable,
                     "relay round " + std::to_string(c.tag) + ": " + why));
    cs.erase(std::remove_if(cs.begin(), cs.end(),
                            [&](const tag_claim& c) {
                              return c.origin == origin;
                            }),
             cs.end());
  };
  auto drop_tagged = [=](peer_inbox& p) {
    for (auto& [tag, x] : p.tagged)
      x.budget->release(x.bytes.size());
    p.tagged.clear();
  };
  // Stopping fails every open claim at once: a router awaiting one handles
  // nothing else until it is answered.
  self->set_exit_handler([=](caf::exit_msg& em) {
    for (auto& [peer, p] : self->state.peers)
      fail_waiters(p, "the data plane stopped");
    for (auto& c : self->state.tag_claims)
      c.rp.deliver(make_error(errc::unreachable, "the data plane stopped"));
    self->state.tag_claims.clear();
    self->quit(em.reason);
  });
  // Only this node's data plane and router talk to the inbox: its handle is
  // never sent to another node.
  auto local = [=] {
    auto& src = self->current_sender();
    return !src || src->node() == self->node();
  };
  return {
    [=](data_up_atom, std::uint32_t peer, std::uint64_t link_gen,
        std::shared_ptr<data_budget> budget) {
      if (!local())
        return;
      auto& p = self->state.peers[peer];
      p.link_gen = link_gen;
      p.up = true;
      p.budget = std::move(budget);
    },
    [=](data_router_atom, const caf::actor_addr& router) {
      if (local())
        self->state.router = router;
    },
    [=](data_ready_atom, std::uint32_t peer, std::uint64_t link_gen,
        std::uint64_t id, std::uint32_t tag, shared_bytes& bytes,
        std::uint64_t order, std::string& meta) {
      if (!local())
        return;
      auto i = self->state.peers.find(peer);
      if (i == self->state.peers.end() || i->second.link_gen != link_gen)
        return; // a link of a lost peer; its budget dies with it
      auto& p = i->second;
      p.highest = std::max(p.highest, id);
      if (tag != 0) {
        auto& cs = self->state.tag_claims;
        auto c = std::find_if(cs.begin(), cs.end(), [&](const tag_claim& c) {
          return c.tag == tag && (c.via == peer || c.origin == peer);
        });
        if (c != cs.end()) {
          p.budget->release(bytes.size());
          c->rp.deliver(std::move(bytes));
          cs.erase(c);
          return;
        }
        if (tag <= p.tag_done || p.tagged.count(tag) > 0) {
          p.budget->release(bytes.size()); // settled, or a second copy
          return;
        }
        if (p.tagged.size() >= 64)
          drop_tagged(p); // a peer flooding tags gets none kept
        p.tagged.emplace(tag, ready_bytes{std::move(bytes), p.budget});
        return;
      }
      if (p.abandoned.erase(id) > 0) {
        p.budget->release(bytes.size());
        return;
      }
      if (auto w = p.waiters.find(id); w != p.waiters.end()) {
        p.budget->release(bytes.size());
        w->second.first.deliver(std::move(bytes));
        p.waiters.erase(w);
        return;
      }
      self->state.ready->put(peer, id, std::move(bytes), p.budget);
      // Bytes with their header: the router may route them before their
      // reference comes (it takes them from the table, or the reference
      // does, whichever is handled first).
      if (!meta.empty())
        if (auto r = caf::actor_cast<caf::actor>(self->state.router))
          self->send(r, arrived_atom::value, peer, id, order, std::move(meta));
    },
    [=](data_down_atom, std::uint32_t peer, std::uint64_t link_gen,
        const std::string& why) {
      if (!local())
        return;
      auto i = self->state.peers.find(peer);
      if (i == self->state.peers.end() || i->second.link_gen != link_gen)
        return;
      i->second.up = false;
      fail_waiters(i->second, "the data connection ended (" + why + ")");
      fail_tag_claims(peer, "the data connection from its origin ended");
    },
    [=](data_drop_atom, std::uint32_t peer) {
      if (!local())
        return;
      auto i = self->state.peers.find(peer);
      if (i == self->state.peers.end())
        return;
      fail_waiters(i->second, "peer lost");
      fail_tag_claims(peer, "its origin was lost");
      drop_tagged(i->second);
      self->state.ready->drop(peer);
      if (i->second.budget)
        i->second.budget->close();
      self->state.peers.erase(i);
    },
    [=](data_take_atom, std::uint32_t peer,
        std::uint64_t id) -> caf::result<shared_bytes> {
      if (!local())
        return make_error(errc::unauthorized, "not a local claim");
      auto& p = self->state.peers[peer];
      if (auto bytes = self->state.ready->take(peer, id))
        return std::move(*bytes);
      // A peer whose link was never up here: the dialer registers its
      // receiving side (data_up) just after it wrote the bind, so under
      // load the sender can take the bind, queue a transfer and send its
      // reference before that message is in this mailbox (seen: a 1 MB
      // model dropped as "no data connection from the peer" at start-up,
      // and a bench round that never completed). Such a claim waits like
      // any other; a link that was up and ended still fails at once.
      if ((!p.up && p.link_gen != 0) || id <= p.highest)
        return make_error(errc::unreachable,
                          "transfer " + std::to_string(id) + " is not coming: "
                            + (p.up ? "it was dropped"
                                    : "no data connection from the peer"));
      auto rp = self->make_response_promise();
      p.waiters.emplace(
        id, std::make_pair(rp, self->clock().now() + self->state.timeout));
      arm_sweep(self->state.timeout);
      return rp;
    },
    [=](data_take_tag_atom, std::uint32_t via, std::uint32_t origin,
        std::uint32_t tag) -> caf::result<shared_bytes> {
      if (!local())
        return make_error(errc::unauthorized, "not a local claim");
      if (tag == 0)
        return make_error(errc::malformed_input, "relay round 0");
      for (auto from : {via, origin}) {
        auto i = self->state.peers.find(from);
        if (i == self->state.peers.end())
          continue;
        if (auto r = i->second.tagged.find(tag); r != i->second.tagged.end()) {
          auto bytes = std::move(r->second.bytes);
          r->second.budget->release(bytes.size());
          i->second.tagged.erase(r);
          return bytes;
        }
      }
      auto o = self->state.peers.find(origin);
      if (o == self->state.peers.end() || !o->second.up)
        return make_error(errc::unreachable,
                          "relay round " + std::to_string(tag)
                            + ": no data connection from its origin");
      auto rp = self->make_response_promise();
      auto key = ++self->state.next_key;
      self->state.tag_claims.push_back(tag_claim{key, via, origin, tag, rp});
      self->delayed_send(self, self->state.timeout, data_expire_atom::value,
                         key);
      return rp;
    },
    [=](data_tag_done_atom, std::uint32_t via, std::uint32_t origin,
        std::uint32_t tag) {
      if (!local())
        return;
      for (auto from : {via, origin}) {
        auto i = self->state.peers.find(from);
        if (i == self->state.peers.end())
          continue;
        auto& p = i->second;
        p.tag_done = std::max(p.tag_done, tag);
        auto end = p.tagged.upper_bound(p.tag_done);
        for (auto r = p.tagged.begin(); r != end; ++r)
          r->second.budget->release(r->second.bytes.size());
        p.tagged.erase(p.tagged.begin(), end);
      }
    },
    [=](data_expire_atom, std::uint64_t key) {
      if (!local())
        return;
      auto& cs = self->state.tag_claims;
      auto c = std::find_if(cs.begin(), cs.end(), [&](const tag_claim& c) {
        return c.key == key;
      });
      if (c == cs.end())
        return;
      c->rp.deliver(make_error(errc::timeout,
                               "relay round " + std::to_string(c->tag)
                                 + " did not arrive in time"));
      cs.erase(c);
    },
    // The sweep: claims past their deadline fail (their bytes, should they
    // still come, are discarded); the timer is armed again for the earliest
    // claim left, if any.
    [=](data_expire_atom) {
      if (!local())
        return;
      self->state.sweep_armed = false;
      auto now = self->clock().now();
      std::optional<caf::actor_clock::time_point> next;
      for (auto& [peer, p] : self->state.peers)
        for (auto w = p.waiters.begin(); w != p.waiters.end();) {
          if (w->second.second > now) {
            if (!next || w->second.second < *next)
              next = w->second.second;
            ++w;
            continue;
          }
          w->second.first.deliver(make_error(errc::timeout,
                                             "transfer "
                                               + std::to_string(w->first)
                                               + " did not arrive in time"));
          if (p.abandoned.size() >= 1024)
            p.abandoned.erase(p.abandoned.begin());
          p.abandoned.insert(w->first);
          w = p.waiters.erase(w);
        }
      if (next)
        arm_sweep(std::chrono::duration_cast<caf::timespan>(*next - now));
    },
  };
}

} // namespace

caf::actor spawn_data_inbox(caf::actor_system& sys, std::uint32_t node,
                            caf::timespan timeout,
                            std::shared_ptr<data_ready_table> ready) {
  return sys.spawn(data_inbox, node, timeout, std::move(ready));
}

} // namespace dice::net
