#pragma once

// Internals shared by messages/torch/learner_group*.cpp, compiled with
// USE_C10D_GLOO. Nothing else includes this: it pulls in c10d and gloo.

#include "dice/errc.hpp"
#include "dice/torch/learner_group.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <csignal>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dice::detail {

using pg_ptr = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

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

  // Marks the group broken and drops its connections, so that every peer
  // blocked on this rank fails at once instead of at its timeout.
  caf::error fail(caf::error err) {
    detail::pg_ptr dying;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (!broken)
        broken = err;
      dying = std::move(pg);
    }
    dying.reset(); // joins Gloo's threads outside the lock
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
    while (next_wait < works.size())
      wait_one();
    if (first_error.empty())
      return caf::none;
    std::runtime_error ex{first_error};
    return fail(detail::from_exception(ex, where() + ": " + what + " failed"));
  }
};

} // namespace dice
