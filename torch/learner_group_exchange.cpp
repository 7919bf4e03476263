// reduce_mode::exchange: every rank sends its whole gradient to every other
// rank over the group's own links (learner_group_links_step.cpp: the caller's
// thread writes and reads the sockets) and sums all ranks' gradients in
// rank order, so every rank computes the same bits.
//
// Why not c10d's allreduce for this: its ring takes 2 (L-1) steps, each a
// message that Gloo sends only once the receiver announced its receive, on
// a worker thread the caller hands the work to. Why not Gloo's send/recv
// either (the exchange before 2026-12-06): Gloo's device thread reads each
// message and wakes the caller, a hand-off per message on each side. Here a
// step is one message per peer, written and read by the caller. At L = 2
// each rank moves the gradient once each way, as the ring does.

#include "learner_group_impl.hpp"
#include <torch/torch.h>

#include <cstring>
#include <type_traits>

namespace dice {

namespace {

// Where tensors start in a message: aligned, so that every dtype can be
// read in place from the receive buffer (malloc's alignment).
constexpr std::size_t align = 16;

// For a small model the tensor operations' own dispatch (a few us each) is
// most of the step's cost, so floats and doubles are summed through their
// pointers; other dtypes take torch's operations.
bool raw(const at::Tensor& t) {
  return t.is_contiguous()
    && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
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

// own = the average of own (rank `self`) and others[p] (what rank p sent,
// laid out as own), summed in rank order.
void average(const at::Tensor& own, std::size_t self,
             const std::vector<const char*>& others) {
  auto size = others.size();
  if (raw(own)) {
    auto run = [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      auto other = [&](std::size_t p) {
        return reinterpret_cast<const T*>(others[p]);
      };
      if (size == 2) {
        sum_pair(typed, other(1 - self), own.numel(), T{2});
        return;
      }
      std::vector<const T*> terms;
      for (std::size_t p = 0; p < size; ++p)
        terms.push_back(p == self ? typed : other(p));
      sum_in_order(typed, terms, own.numel());
    };
    if (own.scalar_type() == at::kFloat)
      run(static_cast<float*>(own.data_ptr()));
    else
      run(static_cast<double*>(own.data_ptr()));
    return;
  }
  auto term = [&](std::size_t p) {
    return p == self ? own
                     : torch::from_blob(const_cast<char*>(others[p]),
                                        own.sizes(), own.options());
  };
  if (size == 2) { // a + b = b + a: summed in place on both ranks
    own.add_(term(1 - self));
    own.div_(2);
    return;
  }
  auto acc = term(0).clone();
  for (std::size_t p = 1; p < size; ++p)
    acc.add_(term(p));
  own.copy_(acc);
  own.div_(static_cast<std::int64_t>(size));
}

} // namespace

caf::error learner_group::impl::exchange(std::vector<at::Tensor>& grads,
                                         bool layout_changed) {
  detail::links_ptr lk;
  {
    std::lock_guard<std::mutex> guard{mtx};
    if (broken)
      return broken;
    lk = links;
  }
  if (!lk)
    return make_error(errc::invalid_config, where() + ": no exchange links");
  auto self = static_cast<std::size_t>(cfg.rank);
  auto peers = static_cast<std::size_t>(cfg.size);
  auto& st = xs;
  // Zeros between tensors, to keep each one aligned.
  static const char padding[align] = {};
  try {
    torch::NoGradGuard no_grad;
    if (layout_changed || !st.ready) {
      st.offsets.clear();
      std::size_t off = 0;
      for (auto& g : grads) {
        off = (off + align - 1) / align * align;
        st.offsets.push_back(off);
        off += static_cast<std::size_t>(g.numel()) * g.element_size();
      }
      st.bytes = off;
      st.recv.assign(peers, {});
      for (std::size_t p = 0; p < peers; ++p)
        if (p != self)
          st.recv[p].resize(st.bytes);
      st.staged.assign(grads.size(), at::Tensor{});
      st.ready = true;
    }
    // The message: every gradient in place (a contiguous copy of one that
    // is not), aligned by padding.
    std::vector<iovec> out;
    out.reserve(2 * grads.size());
    std::size_t at = 0;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      auto& g = grads[k];
      if (at < st.offsets[k])
        out.push_back(iovec{const_cast<char*>(padding), st.offsets[k] - at});
      auto& src = g.is_contiguous() ? g : (st.staged[k] = g.contiguous());
      auto n = static_cast<std::size_t>(g.numel()) * g.element_size();
      if (n > 0)
        out.push_back(iovec{src.data_ptr(), n});
      at = st.offsets[k] + n;
    }
    std::vector<char*> in(peers, nullptr);
    for (std::size_t p = 0; p < peers; ++p)
      if (p != self)
        in[p] = st.recv[p].data();
    if (auto err = lk->exchange(out, st.bytes, in, cfg.timeout, where())) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        if (broken) // aborted meanwhile: that is the reason
          return broken;
      }
      return fail(std::move(err));
    }
    // Sum in rank order on every rank (a + b is b + a in IEEE arithmetic,
    // so at L = 2 the order does not even matter).
    std::vector<const char*> others(peers, nullptr);
    for (std::size_t k = 0; k < grads.size(); ++k) {
      auto& g = grads[k];
      if (g.numel() == 0)
        continue;
      for (std::size_t p = 0; p < peers; ++p)
        if (p != self)
          others[p] = st.recv[p].data() + st.offsets[k];
      auto& own = g.is_contiguous() ? g : st.staged[k];
      average(own, self, others);
      if (!g.is_contiguous())
        g.copy_(own);
    }
    return caf::none;
  } catch (const std::exception& e) {
    return fail(
      detail::from_exception(e, where() + ": gradient exchange failed"));
  }
}

} // namespace dice
