// Auto relay mode: the origin times its rounds both ways and keeps the
// faster. The relay tree pays only where the origin's link is the limit (it
// sends k copies a round instead of N); where every receiver shares the
// origin's cores and no link limits (loopback), its store-and-forward hops
// and per-receiver digests make it slower than one copy per peer.
//
// A probe series alternates `relay_probes` rounds of each way, one probe in
// flight at a time. A tree probe is an ordinary relay round, settled when
// every receiver confirmed it. A star probe is the ordinary direct path
// (exactly what the star mode sends) followed by one echo request per
// receiver, `(relay, round, receiver, true)`: the receiver handles it only
// after it delivered the snapshot sent before it (a direct data reference
// is claimed with `await`, and to_peer keeps the order), and answers with
// its own report. The medians decide; the decision is logged with the
// figures and probed again after `relay_reprobe` rounds, or at once when
// the number of receivers changes.
#include "router_impl.hpp"

#include <atomic>

namespace dice {

namespace {

std::atomic<std::uint64_t> tree_choices{0};
std::atomic<std::uint64_t> star_choices{0};

} // namespace

relay_choice_counts relay_choices() noexcept {
  return {tree_choices.load(), star_choices.load()};
}

} // namespace dice

namespace dice::router_detail {

namespace {

using probe_kind = router_relay_round::probe_kind;

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

std::string ms(double s) {
  return fmt::format("{:.1f} ms", s * 1e3);
}

} // namespace

relay_plan relay_auto_plan(router_ptr self, std::size_t receivers) {
  auto& st = self->state;
  auto& a = st.relay_auto;
  if (a.receivers != receivers) {
    auto last = a.choice != probe_kind::none ? a.choice : a.previous;
    auto series = a.series + 1;
    a = router_relay_auto{};
    a.receivers = receivers;
    a.previous = last;
    a.series = series;
  }
  if (a.choice != probe_kind::none) {
    if (a.rounds++ < st.cfg.relay_reprobe)
      return {a.choice, false};
    a.previous = a.choice;
    a.choice = probe_kind::none;
    a.tree_s.clear();
    a.star_s.clear();
    a.probes = 0;
    ++a.series;
  }
  // Until a decision: the last one, else the tree (the relay's purpose).
  auto meanwhile = a.previous == probe_kind::star ? probe_kind::star
                                                  : probe_kind::tree;
  auto n = std::max<std::size_t>(st.cfg.relay_probes, 1);
  if (a.probes >= 2 * n)
    return {meanwhile, false}; // the last probes are under way
  for (auto& round : st.relay_rounds)
    if (round.second.probe != probe_kind::none)
      return {meanwhile, false}; // one probe at a time
  auto way = a.probes++ % 2 == 0 ? probe_kind::tree : probe_kind::star;
  return {way, true};
}

void relay_direct_sent(router_ptr self) {
  auto& st = self->state;
  auto round = std::exchange(st.relay_auto.star_round, 0);
  auto i = st.relay_rounds.find(round);
  if (round == 0 || i == st.relay_rounds.end())
    return;
  for (auto node : i->second.pending)
    if (auto p = find_peer(self, node))
      to_peer(self, p->handle, relay_atom::value, round, node, true);
}

void relay_settled(router_ptr self, const router_relay_round& r) {
  auto& st = self->state;
  auto& a = st.relay_auto;
  if (r.probe == probe_kind::none || r.series != a.series
      || a.choice != probe_kind::none)
    return;
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - r.started)
                .count();
  (r.probe == probe_kind::tree ? a.tree_s : a.star_s).push_back(took);
  auto n = std::max<std::size_t>(st.cfg.relay_probes, 1);
  if (a.tree_s.size() < n || a.star_s.size() < n)
    return;
  auto tree = median(a.tree_s);
  auto star = median(a.star_s);
  a.rounds = 0;
  if (star < tree) {
    a.choice = probe_kind::star;
    ++star_choices;
    log::info(st.cfg.node,
              "relay: the star is faster here (" + ms(star) + " vs " + ms(tree)
                + " a round for the relay tree, medians of " + std::to_string(n)
                + " rounds each, " + std::to_string(a.receivers)
                + " receivers), falling back to one copy per peer; probing "
                  "again in "
                + std::to_string(st.cfg.relay_reprobe) + " rounds");
  } else {
    a.choice = probe_kind::tree;
    ++tree_choices;
    log::info(st.cfg.node,
              "relay: the relay tree is faster here (" + ms(tree) + " vs "
                + ms(star) + " a round for the star, medians of "
                + std::to_string(n) + " rounds each, "
                + std::to_string(a.receivers)
                + " receivers), keeping it; probing again in "
                + std::to_string(st.cfg.relay_reprobe) + " rounds");
  }
}

} // namespace dice::router_detail
