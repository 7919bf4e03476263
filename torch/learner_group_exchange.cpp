// reduce_mode::exchange: every rank sends its gradient to every other rank
// over Gloo's pairs (c10d send/recv, in the calling thread) and sums all
// ranks' gradients in rank order, so every rank computes the same bits.
//
// Why not c10d's allreduce for this: its ring takes 2 (L-1) steps, each a
// message that Gloo sends only once the receiver announced its receive
// (NOTIFY_RECV_READY, then the data: a round trip per step), and runs on a
// worker thread the caller hands the work to and waits for. Here a step is
// one message per peer, and the receives of the next step are posted when a
// step ends, so the announcement is long there when the peer sends: the send
// is written at once from the caller's thread. At L = 2 each rank moves the
// gradient once each way, as the ring does.

#include "learner_group_impl.hpp"
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace dice {

namespace {

// Gloo tags of the exchange: this base plus the layout epoch (c10d's send
// and recv tags are non-negative ints; the pair proof uses 0x6c67, and the
// collectives use prefixed slots of their own).
constexpr int exchange_tag = 0x64780000; // "dx"

// One message: `n` elements at `flat` in the concatenated gradient. Either
// a slice of one contiguous tensor sent in place (`packed` false; `offset`
// within tensor `first`), or tensors first..last-1 packed into one buffer.
struct segment {
  std::int64_t flat = 0;
  std::int64_t n = 0;
  std::size_t first = 0;
  std::size_t last = 0;
  bool packed = false;
  std::int64_t offset = 0;
};

std::vector<segment> make_segments(const std::vector<at::Tensor>& grads,
                                   std::size_t limit) {
  std::vector<segment> result;
  std::int64_t flat = 0;
  for (auto& b : detail::make_buckets(grads, limit)) {
    auto& t = grads[b.first];
    if (b.last - b.first == 1 && t.is_contiguous()) {
      // Large tensors in slices: the sum of one overlaps the next's arrival.
      auto per = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(limit / t.element_size()));
      for (std::int64_t off = 0; off < b.numel; off += per)
        result.push_back(segment{flat + off, std::min(per, b.numel - off),
                                 b.first, b.last, false, off});
    } else if (b.numel > 0) {
      result.push_back(segment{flat, b.numel, b.first, b.last, true, 0});
    }
    flat += b.numel;
  }
  return result;
}

using work_ptr = c10::intrusive_ptr<c10d::Work>;

// For a small model the tensor operations' own dispatch (a few us each) is
// most of the step's cost, so floats and doubles are packed, summed and
// unpacked through their pointers; other dtypes take torch's operations.
bool raw(const at::Tensor& t) {
  return t.is_contiguous()
    && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// Copies `t` into `flat` at element `off` (or back, with `back`).
void copy_part(const at::Tensor& flat, std::int64_t off, const at::Tensor& t,
               bool back) {
  auto n = t.numel();
  if (raw(t) && flat.scalar_type() == t.scalar_type()) {
    auto bytes = static_cast<std::size_t>(n) * t.element_size();
    auto* f = static_cast<char*>(flat.data_ptr()) + off * t.element_size();
    auto* x = static_cast<char*>(t.data_ptr());
    if (back)
      std::memcpy(x, f, bytes);
    else
      std::memcpy(f, x, bytes);
    return;
  }
  auto part = flat.narrow(0, off, n).view_as(t);
  if (back)
    t.copy_(part);
  else
    part.copy_(t);
}

// own = (own + other) / size, in one pass (torch's add_ then div_ are two,
// and each dispatch costs more than a small model's whole sum). a + b is
// b + a in IEEE arithmetic, so both ranks of a pair get the same bits.
template <class T>
__attribute__((optimize("tree-vectorize"))) void
sum_pair(T* own, const T* other, std::int64_t n, T size) {
  for (std::int64_t i = 0; i < n; ++i)
    own[i] = (own[i] + other[i]) / size;
}

// own = (terms[0] + terms[1] + ... + terms[L-1]) / L, added in that order
// (terms[self] is own): the same operations in the same order on every
// rank, so every rank gets the same bits.
template <class T>
void sum_in_order(T* own, const std::vector<const T*>& terms, std::int64_t n) {
  auto size = static_cast<T>(terms.size());
  for (std::int64_t i = 0; i < n; ++i) {
    T acc = terms[0][i];
    for (std::size_t p = 1; p < terms.size(); ++p)
      acc = acc + terms[p][i];
    own[i] = acc / size;
  }
}

void average(const at::Tensor& own, std::size_t self,
             const std::vector<at::Tensor>& others) {
  auto size = others.size();
  if (raw(own)) {
    auto run = [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      if (size == 2) {
        sum_pair(typed, static_cast<const T*>(others[1 - self].data_ptr()),
                 own.numel(), T{2});
        return;
      }
      std::vector<const T*> terms;
      for (std::size_t p = 0; p < size; ++p)
        terms.push_back(
          p == self ? typed : static_cast<const T*>(others[p].data_ptr()));
      sum_in_order(typed, terms, own.numel());
    };
    if (own.scalar_type() == at::kFloat)
      run(static_cast<float*>(own.data_ptr()));
    else
      run(static_cast<double*>(own.data_ptr()));
    return;
  }
  if (size == 2) { // a + b = b + a: summed in place on both ranks
    own.add_(others[1 - self]);
    own.div_(2);
    return;
  }
  auto term = [&](std::size_t p) {
    return p == self ? own : others[p];
  };
  auto acc = term(0).clone();
  for (std::size_t p = 1; p < size; ++p)
    acc.add_(term(p));
  own.copy_(acc);
  own.div_(static_cast<std::int64_t>(size));
}

} // namespace

caf::error learner_group::impl::exchange(const detail::pg_ptr& pg,
                                         std::vector<at::Tensor>& grads,
                                         bool layout_changed) {
  auto size = cfg.size;
  auto self = static_cast<std::size_t>(cfg.rank);
  auto peers = static_cast<std::size_t>(size);
  auto segs = make_segments(grads, cfg.bucket_bytes);
  auto& st = xs;
  std::vector<work_ptr> in_flight;
  std::string first_error;
  // Everything below runs c10d calls that throw on a broken pair.
  try {
    torch::NoGradGuard no_grad;
    if (layout_changed || !st.ready) {
      // Receives posted for an older layout stay posted (p2p keeps them
      // alive) under the old tag, which no message will use again.
      if (st.ready)
        ++st.epoch;
      st.step = 0;
      for (int b = 0; b < 2; ++b) {
        for (auto& row : st.posted[b])
          st.stale.insert(st.stale.end(), row.begin(), row.end());
        st.posted[b].clear();
        st.recv[b].assign(peers, {});
        for (std::size_t p = 0; p < peers; ++p) {
          if (p == self)
            continue;
          for (auto& s : segs)
            st.recv[b][p].push_back(
              torch::empty({s.n}, grads[s.first].options()));
        }
      }
      st.pack.assign(segs.size(), at::Tensor{});
      for (std::size_t i = 0; i < segs.size(); ++i)
        if (segs[i].packed)
          st.pack[i] = torch::empty({segs[i].n},
                                    grads[segs[i].first].options());
      st.ready = true;
    }
    auto tag = exchange_tag + static_cast<int>(st.epoch & 0xFFFF);
    auto post_receives = [&](int b) {
      std::vector<std::vector<work_ptr>> posted(peers);
      for (std::size_t p = 0; p < peers; ++p) {
        if (p == self)
          continue;
        for (auto& t : st.recv[b][p]) {
          std::vector<at::Tensor> ts{t};
          posted[p].push_back(pg->recv(ts, static_cast<int>(p), tag));
        }
      }
      return posted;
    };
    // Receives are posted two steps ahead, alternating between two sets of
    // buffers: one step ahead, a peer that sends right after the last step
    // (nothing to compute in between) could still find this rank's
    // announcement on the way and have to wait for it.
    auto cur = static_cast<int>(st.step & 1);
    if (st.posted[0].empty() && st.posted[1].empty()) {
      st.posted[cur] = post_receives(cur);
      st.posted[1 - cur] = post_receives(1 - cur);
    }
    auto receives = std::move(st.posted[cur]);
    st.posted[cur].clear();
    auto& recv = st.recv[cur];
    for (auto& row : receives)
      in_flight.insert(in_flight.end(), row.begin(), row.end());
    // Sends, in segment order to every peer (rank order after this one, so
    // that not every rank writes to rank 0 first).
    std::vector<std::vector<work_ptr>> sends(segs.size());
    for (std::size_t i = 0; i < segs.size(); ++i) {
      auto& s = segs[i];
      at::Tensor src;
      if (s.packed) {
        src = st.pack[i];
        std::int64_t off = 0;
        for (auto k = s.first; k < s.last; ++k) {
          copy_part(src, off, grads[k], false);
          off += grads[k].numel();
        }
      } else {
        src = grads[s.first].view({-1}).narrow(0, s.offset, s.n);
      }
      for (std::size_t j = 1; j < peers; ++j) {
        std::vector<at::Tensor> ts{src};
        auto p = static_cast<int>((self + j) % peers);
        sends[i].push_back(pg->send(ts, p, tag));
        in_flight.push_back(sends[i].back());
      }
    }
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (broken) {
        for (auto& w : in_flight)
          w->abort();
        return broken;
      }
      p2p = in_flight;
      p2p.insert(p2p.end(), st.stale.begin(), st.stale.end());
      for (auto& row : st.posted[1 - cur])
        p2p.insert(p2p.end(), row.begin(), row.end());
    }
    auto await = [&](const work_ptr& w) {
      if (!w->wait())
        throw std::runtime_error("aborted");
    };
    // Sum each segment as it arrives, in rank order on every rank (a + b is
    // b + a in IEEE arithmetic, so at L = 2 the order does not even matter).
    for (std::size_t i = 0; i < segs.size(); ++i) {
      auto& s = segs[i];
      for (std::size_t p = 0; p < peers; ++p)
        if (p != self)
          await(receives[p][i]);
      // The source is summed into: its sends must have left it.
      for (auto& w : sends[i])
        await(w);
      auto own = s.packed ? st.pack[i]
                          : grads[s.first].view({-1}).narrow(0, s.offset, s.n);
      std::vector<at::Tensor> others(peers);
      for (std::size_t p = 0; p < peers; ++p)
        if (p != self)
          others[p] = recv[p][i];
      average(own, self, others);
      if (s.packed) {
        std::int64_t off = 0;
        for (auto k = s.first; k < s.last; ++k) {
          copy_part(own, off, grads[k], true);
          off += grads[k].numel();
        }
      }
    }
    // The receives of the step after next, into the buffers just summed.
    // This step is complete on this rank whatever happens here: a peer that
    // left meanwhile breaks the group for the next call, not this one.
    try {
      st.posted[cur] = post_receives(cur);
    } catch (const std::exception& e) {
      fail(detail::from_exception(e, where() + ": gradient exchange failed"));
      return caf::none;
    }
    ++st.step;
    std::lock_guard<std::mutex> guard{mtx};
    if (broken) {
      for (auto& set : st.posted)
        for (auto& row : set)
          for (auto& w : row)
            w->abort();
      st.posted[0].clear();
      st.posted[1].clear();
      return broken;
    }
    // Completed works need no abort any more; receives of older layouts
    // (other tags) and the posted ones do.
    p2p = st.stale;
    for (auto& set : st.posted)
      for (auto& row : set)
        p2p.insert(p2p.end(), row.begin(), row.end());
    return caf::none;
  } catch (const std::exception& e) {
    first_error = e.what();
  }
  {
    std::lock_guard<std::mutex> guard{mtx};
    if (broken) // aborted meanwhile: that is the reason
      return broken;
  }
  for (auto& w : in_flight)
    w->abort();
  return fail(detail::from_exception(std::runtime_error{first_error},
                                     where() + ": gradient exchange failed"));
}

} // namespace dice
