// The stores a learner group forms through: rank 0's TCPStore behind a
// wrapper that can close it, or a dice rendezvous_store adapted to c10d.

#include "learner_group_impl.hpp"

#include <algorithm>

namespace dice {

rendezvous_store::~rendezvous_store() {
  // nop
}

namespace detail {

void closable_store::close() {
  std::lock_guard<std::mutex> guard{mtx_};
  inner_.reset();
}

namespace {

// c10d's view of a dice rendezvous_store (c10d reports by exception).
class adapted_store : public c10d::Store {
 public:
  adapted_store(std::shared_ptr<rendezvous_store> inner,
                std::chrono::milliseconds timeout)
    : c10d::Store(timeout), inner_(std::move(inner)) {}

  void set(const std::string& key, const std::vector<uint8_t>& v) override {
    if (auto err = inner_->set(key, v))
      throw std::runtime_error(render(err));
  }

  std::vector<uint8_t> get(const std::string& key) override {
    return get(key, timeout_);
  }

  int64_t add(const std::string& key, int64_t value) override {
    auto x = inner_->add(key, value);
    if (!x)
      throw std::runtime_error(render(x.error()));
    return *x;
  }

  bool deleteKey(const std::string&) override {
    throw std::runtime_error("rendezvous_store: deleteKey is not supported");
  }

  bool check(const std::vector<std::string>& keys) override {
    for (auto& k : keys)
      if (!inner_->get(k, std::chrono::milliseconds{0}))
        return false;
    return true;
  }

  int64_t getNumKeys() override {
    throw std::runtime_error("rendezvous_store: getNumKeys is not supported");
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, timeout_);
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& k : keys) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      get(k, std::max(left, std::chrono::milliseconds{0}));
    }
  }

 private:
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) {
    auto x = inner_->get(key, timeout);
    if (!x)
      throw std::runtime_error(render(x.error()));
    return std::move(*x);
  }

  std::shared_ptr<rendezvous_store> inner_;
};

} // namespace

c10::intrusive_ptr<c10d::Store>
adapt_store(std::shared_ptr<rendezvous_store> store,
            std::chrono::milliseconds timeout) {
  return c10::make_intrusive<adapted_store>(std::move(store), timeout);
}

bool timed_out(const std::string& what) {
  return what.find("imed out") != std::string::npos
    || what.find("imeout") != std::string::npos;
}

// c10d reports everything by exception; dice reports values.
caf::error from_exception(const std::exception& e, const std::string& ctx) {
  std::string what = e.what();
  // c10::Error appends a C++ backtrace; the first line says what happened.
  if (auto nl = what.find('\n'); nl != std::string::npos)
    what.resize(nl);
  return make_error(timed_out(what) ? errc::timeout : errc::unreachable,
                    ctx + ": " + what);
}

} // namespace detail

} // namespace dice
