#pragma once

// Internals shared by torch/learner_group*.cpp, compiled with
// USE_C10D_GLOO. Nothing else includes this: it pulls in c10d and gloo.

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"

#include "learner_group_links.hpp"
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <csignal>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dice::detail {

// ProcessGroupGloo with a way to break its connections. c10d 1.13 has no
// abort: destroying the group joins its worker threads, which wait for the
// operations in flight, and Gloo does not fail a send that is already half
// on the socket when the peer goes (tcp/pair.cc signals only bound buffers
// in tx_), so that send waits out the whole collective timeout.
class breakable_gloo : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  /// Closes every connection (with a reset), so that each peer sees the
  /// close at once. This rank's pending operations end at their timeout.
  void break_connections();
};

using pg_ptr = c10::intrusive_ptr<breakable_gloo>;

/// Destroys a broken process group on a background thread: its destructor
/// waits for operations still in flight (at most the collective timeout),
/// and the rank that gave up on them should not wait with them. Threads are
/// joined at exit.
void bury(pg_ptr pg, std::vector<c10::intrusive_ptr<c10d::Work>> works);

/// Trainable parameters whose gradients take part, undefined ones made
/// zeros.
std::vector<at::Tensor> gradients(torch::nn::Module& m);

/// A hash of the layout all ranks must share: dtype and element count of
/// each tensor.
std::int64_t layout_signature(const std::vector<at::Tensor>& xs);

/// Consecutive tensors of one dtype, at most `limit` bytes (a larger tensor
/// forms a bucket of its own).
struct bucket {
  std::size_t first = 0;
  std::size_t last = 0; // one past
  std::int64_t numel = 0;
};

/// `xs` in buckets of at most `limit` bytes.
std::vector<bucket> make_buckets(const std::vector<at::Tensor>& xs,
                                 std::size_t limit);

/// What `reduce_mode::exchange` keeps between steps
/// (learner_group_exchange.cpp).
struct exchange_state {
  bool ready = false;
  /// Where each tensor starts in a message (16-byte aligned), and its size.
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
  /// What each peer sent last, [rank] (this rank's own stays empty).
  std::vector<std::vector<char>> recv;
  /// Contiguous copies of gradients that are not contiguous, [tensor].
  std::vector<at::Tensor> staged;
};

/// Turns a c10d/gloo exception into `errc::timeout` or `errc::unreachable`.
caf::error from_exception(const std::exception& e, const std::string& ctx);

// Forwards to a TCPStore that can be dropped: once the group has formed,
// rank 0 closes its store so that the unauthenticated listener (TCPStore
// binds every interface) exists only while the group forms.
class closable_store : public c10d::Store {
 public:
  explicit closable_store(c10::intrusive_ptr<c10d::TCPStore> inner)
    : c10d::Store(inner->getTimeout()), inner_(std::move(inner)) {}

  /// Drops the TCPStore (rank 0: stops listening); later calls throw.
  void close();

  void set(const std::string& key, const std::vector<uint8_t>& v) override {
    get_inner()->set(key, v);
  }

  std::vector<uint8_t>
  compareSet(const std::string& key, const std::vector<uint8_t>& expected,
             const std::vector<uint8_t>& desired) override {
    return get_inner()->compareSet(key, expected, desired);
  }

  std::vector<uint8_t> get(const std::string& key) override {
    return get_inner()->get(key);
  }

  int64_t add(const std::string& key, int64_t value) override {
    return get_inner()->add(key, value);
  }

  bool deleteKey(const std::string& key) override {
    return get_inner()->deleteKey(key);
  }

  bool check(const std::vector<std::string>& keys) override {
    return get_inner()->check(keys);
  }

  int64_t getNumKeys() override {
    return get_inner()->getNumKeys();
  }

  void wait(const std::vector<std::string>& keys) override {
    get_inner()->wait(keys);
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    get_inner()->wait(keys, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> get_inner() {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!inner_)
      throw std::runtime_error("the rendezvous store is closed");
    return inner_;
  }

  std::mutex mtx_;
  c10::intrusive_ptr<c10d::TCPStore> inner_;
};

/// Every pair proves to each other that both know `cfg.secret`: the ranks
/// all-gather fresh nonces, then each sends each peer, over their own pair,
/// HMAC-SHA256(secret, "dice-lg pair" | generation | from | to | nonces);
/// all ranks then all-gather their verdicts, so that all fail together with
/// `errc::handshake_failed` naming who could not verify whom.
caf::error prove_pairs(c10d::ProcessGroupGloo& pg,
                       const learner_group_config& cfg,
                       const std::string& where);

/// c10d's view of a dice `rendezvous_store`.
c10::intrusive_ptr<c10d::Store>
adapt_store(std::shared_ptr<rendezvous_store> store,
            std::chrono::milliseconds timeout);

// Blocks SIGPIPE in this thread (and the threads it creates) while alive.
class sigpipe_blocked {
 public:
  sigpipe_blocked() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~sigpipe_blocked() {
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

} // namespace dice::detail

namespace dice {

struct learner_group::impl {
  learner_group_config cfg;
  c10::intrusive_ptr<c10d::TCPStore> server; // rank 0 until joined
  std::uint16_t port = 0;
  mutable std::mutex mtx;
  detail::pg_ptr pg;
  bool joined = false;
  caf::error broken;
  // Gradient layout checked across ranks, and the flat buffers for it.
  std::int64_t checked_layout = 0;
  bool layout_checked = false;
  std::vector<at::Tensor> buffers;
  detail::exchange_state xs;
  // The exchange's own connections (size > 1, once joined): a failure
  // shuts them, so that a step blocked on one returns at once.
  detail::links_ptr links;

  // Exchanges and averages `grads` (reduce_mode::exchange).
  caf::error exchange(std::vector<at::Tensor>& grads, bool layout_changed);

  std::string where() const {
    return "learner group g" + std::to_string(cfg.generation) + " rank "
      + std::to_string(cfg.rank) + "/" + std::to_string(cfg.size);
  }

  // The process group for one operation, or the reason there is none. The
  // caller's copy keeps it alive even if abort() runs meanwhile.
  caf::expected<detail::pg_ptr> acquire() {
    std::lock_guard<std::mutex> guard{mtx};
    if (broken)
      return broken;
    if (!joined)
      return make_error(errc::invalid_config, where() + ": not joined yet");
    return pg;
  }

  // The process group even when broken (null once failed completely).
  detail::pg_ptr acquire_unchecked() {
    std::lock_guard<std::mutex> guard{mtx};
    return pg;
  }

  // Marks the group broken and drops its connections, so that every peer
  // blocked on this rank fails at once instead of at its timeout.
  // Works still in flight (`abandoned`) keep their tensors alive; they end
  // in the background, at the latest at the collective timeout.
  // `leaving`: this rank ends its membership (abort) rather than failing;
  // if no collective of it is in flight, its connections then close in
  // order (FIN) once the group is destroyed, so that peers still reading
  // its last messages get them before they see it gone (a reset discards
  // what the peer's kernel has not yet handed to Gloo).
  caf::error fail(caf::error err,
                  std::vector<c10::intrusive_ptr<c10d::Work>> abandoned = {},
                  bool leaving = false) {
    detail::pg_ptr dying;
    detail::links_ptr cut;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (!broken)
        broken = err;
      dying = std::move(pg);
      cut = std::move(links);
    }
    // A step waiting on a link returns at once, and sees `broken`. FIN, not
    // a reset: a peer still reading this rank's last message gets it.
    if (cut)
      cut->shut();
    if (!dying)
      return err;
    // Only this reference: no call of this rank holds the group.
    if (!leaving || dying.use_count() > 1)
      dying->break_connections();
    // abort() may come while another thread's step is in flight: the group
    // is destroyed in the background either way.
    detail::bury(std::move(dying), std::move(abandoned));
    return err;
  }

  // Runs works in order with at most cfg.threads in flight: more would only
  // queue, and a queue of works stuck behind a hung peer would make tearing
  // down the group wait for each of them in turn.
  template <class Launch>
  caf::error run_works(std::size_t n, Launch launch, const char* what) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::size_t next_wait = 0;
    std::string first_error;
    auto wait_one = [&] {
      try {
        works[next_wait]->wait();
      } catch (const std::exception& e) {
        if (first_error.empty())
          first_error = e.what();
      }
      ++next_wait;
    };
    // After the first error the other works in flight are abandoned, not
    // awaited: one may be a send Gloo never fails (see breakable_gloo).
    try {
      for (std::size_t i = 0; i < n && first_error.empty(); ++i) {
        if (works.size() - next_wait >= static_cast<std::size_t>(cfg.threads))
          wait_one();
        if (first_error.empty())
          works.push_back(launch(i));
      }
    } catch (const std::exception& e) {
      if (first_error.empty())
        first_error = e.what();
    }
    while (next_wait < works.size() && first_error.empty())
      wait_one();
    if (first_error.empty())
      return caf::none;
    auto err = detail::from_exception(std::runtime_error{first_error},
                                      where() + ": " + what + " failed");
    // Break the connections first, so that no more bytes arrive; a work
    // that already had its bytes gets a short grace to finish writing into
    // its tensors (some are the caller's gradients), the rest are abandoned
    // and end at their timeout in the background.
    if (auto live = acquire_unchecked())
      live->break_connections();
    std::vector<c10::intrusive_ptr<c10d::Work>> abandoned;
    auto grace_end = std::chrono::steady_clock::now()
      + std::chrono::milliseconds{100};
    for (; next_wait < works.size(); ++next_wait) {
      auto& w = works[next_wait];
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        grace_end - std::chrono::steady_clock::now());
      try {
        w->wait(std::max(left, std::chrono::milliseconds{1}));
      } catch (const std::exception&) {
        // Failed or still running: only the latter is abandoned.
      }
      if (!w->isCompleted())
        abandoned.push_back(w);
    }
    return fail(err, std::move(abandoned));
  }
};

} // namespace dice
