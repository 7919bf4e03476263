#include "dice/torch/learner_group.hpp"

#include "dice/errc.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>

namespace dice {

namespace {

using pg_ptr = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

// Forwards to a TCPStore that can be dropped: once the group has formed,
// rank 0 closes its store so that the unauthenticated listener (TCPStore
// binds every interface) exists only while the group forms.
class closable_store : public c10d::Store {
 public:
  explicit closable_store(c10::intrusive_ptr<c10d::TCPStore> inner)
    : c10d::Store(inner->getTimeout()), inner_(std::move(inner)) {}

  void close() {
    std::lock_guard<std::mutex> guard{mtx_};
    inner_.reset();
  }

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

std::uint64_t hash_combine(std::uint64_t seed, const void* p, std::size_t n) {
  return XXH3_64bits_withSeed(p, n, seed);
}

// Trainable parameters whose gradients take part, undefined ones as zeros.
std::vector<at::Tensor> gradients(torch::nn::Module& m) {
  std::vector<at::Tensor> result;
  for (auto& p : m.parameters(true)) {
    if (!p.requires_grad())
      continue;
    auto& g = p.mutable_grad();
    if (!g.defined())
      g = torch::zeros_like(p);
    result.push_back(g);
  }
  return result;
}

// The layout all ranks must share: dtype and element count of each tensor.
std::int64_t layout_signature(const std::vector<at::Tensor>& xs) {
  std::uint64_t h = 0x6c6561726e657273; // "learners"
  for (auto& x : xs) {
    std::int64_t item[2] = {static_cast<std::int64_t>(x.scalar_type()),
                            x.numel()};
    h = hash_combine(h, item, sizeof(item));
  }
  return static_cast<std::int64_t>(h);
}

// Consecutive tensors of one dtype, at most `limit` bytes (a larger tensor
// forms a bucket of its own).
struct bucket {
  std::size_t first = 0;
  std::size_t last = 0; // one past
  std::int64_t numel = 0;
};

std::vector<bucket> make_buckets(const std::vector<at::Tensor>& xs,
                                 std::size_t limit) {
  std::vector<bucket> result;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto bytes = static_cast<std::size_t>(xs[i].numel()) * xs[i].element_size();
    if (!result.empty()) {
      auto& b = result.back();
      auto& first = xs[b.first];
      auto used = static_cast<std::size_t>(b.numel) * first.element_size();
      if (first.scalar_type() == xs[i].scalar_type() && used + bytes <= limit) {
        b.last = i + 1;
        b.numel += xs[i].numel();
        continue;
      }
    }
    result.push_back(bucket{i, i + 1, xs[i].numel()});
  }
  return result;
}

} // namespace

rendezvous_store::~rendezvous_store() {
  // nop
}

std::string to_string(reduce_mode x) {
  return x == reduce_mode::flat ? "flat" : "bucketed";
}

// -- impl
// ----------------------------------------------------------------------

struct learner_group::impl {
  learner_group_config cfg;
  c10::intrusive_ptr<c10d::TCPStore> server; // rank 0 until joined
  std::uint16_t port = 0;
  mutable std::mutex mtx;
  pg_ptr pg;
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
  caf::expected<pg_ptr> acquire() {
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
    pg_ptr dying;
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
    return fail(from_exception(ex, where() + ": " + what + " failed"));
  }
};

learner_group::learner_group(std::unique_ptr<impl> ptr)
  : impl_(std::move(ptr)) {}

learner_group::learner_group(learner_group&&) noexcept = default;

learner_group& learner_group::operator=(learner_group&&) noexcept = default;

learner_group::~learner_group() {
  if (impl_)
    abort();
}

caf::expected<learner_group> learner_group::create(learner_group_config cfg) {
  auto bad = [](const std::string& what) {
    return make_error(errc::invalid_config, "learner group: " + what);
  };
  if (cfg.size < 1)
    return bad("size must be at least 1");
  if (cfg.rank < 0 || cfg.rank >= cfg.size)
    return bad("rank " + std::to_string(cfg.rank) + " is outside 0.."
               + std::to_string(cfg.size - 1));
  if (cfg.timeout.count() <= 0)
    return bad("the collective timeout must be positive");
  // TCPStore 1.13 truncates its connect deadline to whole seconds: below
  // one second it gives up before trying.
  if (cfg.join_timeout < std::chrono::seconds{1})
    return bad("join_timeout must be at least 1 s");
  if (cfg.bucket_bytes == 0)
    return bad("bucket_bytes must be positive");
  if (cfg.threads < 1)
    return bad("threads must be at least 1");
  if (cfg.size > 1 && (cfg.address.empty() || cfg.store_host.empty()))
    return bad("address and store_host must be set");
  if (cfg.size > 1 && cfg.rank > 0 && cfg.store_port == 0 && !cfg.store)
    return bad("ranks other than 0 need rank 0's store port");
  auto ptr = std::make_unique<impl>();
  ptr->cfg = std::move(cfg);
  auto& c = ptr->cfg;
  if (c.size > 1 && c.rank == 0 && !c.store) {
    try {
      c10d::TCPStoreOptions opts;
      opts.port = c.store_port;
      opts.isServer = true;
      opts.waitWorkers = false;
      opts.timeout = c.join_timeout;
      ptr->server = c10::make_intrusive<c10d::TCPStore>(c.store_host, opts);
      ptr->port = ptr->server->getPort();
    } catch (const std::exception& e) {
      return from_exception(e,
                            ptr->where() + ": cannot host the store on "
                              + c.store_host + ":"
                              + std::to_string(c.store_port));
    }
  }
  return learner_group{std::move(ptr)};
}

caf::expected<learner_group> learner_group::form(learner_group_config cfg) {
  auto g = create(std::move(cfg));
  if (!g)
    return g.error();
  if (auto err = g->join())
    return err;
  return g;
}

caf::expected<learner_group_config>
learner_group::next_generation(const learner_group_config& old,
                               std::vector<int> survivors) {
  std::sort(survivors.begin(), survivors.end());
  auto bad = [](const std::string& what) {
    return make_error(errc::invalid_config, "learner group: " + what);
  };
  if (survivors.empty())
    return bad("no survivors");
  if (std::adjacent_find(survivors.begin(), survivors.end()) != survivors.end())
    return bad("a survivor is listed twice");
  if (survivors.front() < 0 || survivors.back() >= old.size)
    return bad("a survivor is not a rank of the old group");
  auto self = std::find(survivors.begin(), survivors.end(), old.rank);
  if (self == survivors.end())
    return bad("rank " + std::to_string(old.rank) + " is not a survivor");
  auto next = old;
  next.rank = static_cast<int>(self - survivors.begin());
  next.size = static_cast<int>(survivors.size());
  next.generation = old.generation + 1;
  next.store_port = 0;
  return next;
}

caf::error learner_group::join() {
  auto& d = *impl_;
  auto& c = d.cfg;
  {
    std::lock_guard<std::mutex> guard{d.mtx};
    if (d.broken)
      return d.broken;
    if (d.joined)
      return caf::none;
  }
  if (c.size == 1) {
    std::lock_guard<std::mutex> guard{d.mtx};
    d.joined = true;
    return caf::none;
  }
  c10::intrusive_ptr<closable_store> store;
  try {
    c10::intrusive_ptr<c10d::Store> base;
    if (c.store) {
      base = c10::make_intrusive<adapted_store>(c.store, c.join_timeout);
    } else {
      auto tcp = d.server;
      if (!tcp) {
        c10d::TCPStoreOptions opts;
        opts.port = c.store_port;
        opts.isServer = false;
        opts.timeout = c.join_timeout;
        tcp = c10::make_intrusive<c10d::TCPStore>(c.store_host, opts);
      }
      store = c10::make_intrusive<closable_store>(std::move(tcp));
      d.server.reset(); // from here on, `store` alone holds the listener
      base = store;
    }
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
      "dice/learners/g" + std::to_string(c.generation) + "/", base);
    // A rank claimed twice would silently overwrite the first claimant's
    // address in Gloo's rendezvous.
    if (prefixed->add("claim/" + std::to_string(c.rank), 1) != 1)
      return d.fail(
        make_error(errc::handshake_failed, d.where() + ": rank claimed twice"));
    // Gloo waits for its peers with the collective timeout; everyone
    // arrives first, within the (longer) join timeout.
    if (prefixed->add("arrived", 1) == c.size)
      prefixed->set("all_arrived", std::vector<uint8_t>{1});
    prefixed->wait({"all_arrived"}, c.join_timeout);
    auto opts = c10d::ProcessGroupGloo::Options::create(c.timeout);
    opts->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname(c.address));
    opts->threads = c.threads;
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, c.rank,
                                                          c.size, opts);
    // Everyone is connected once this completes, so nobody reads the store
    // any more and it can close.
    std::vector<at::Tensor> one{torch::ones({1})};
    pg->allreduce(one)->wait();
    if (one[0].item<float>() != static_cast<float>(c.size))
      return d.fail(
        make_error(errc::handshake_failed, d.where() + ": group incomplete"));
    if (store)
      store->close();
    std::lock_guard<std::mutex> guard{d.mtx};
    if (d.broken) // aborted meanwhile
      return d.broken;
    d.pg = std::move(pg);
    d.joined = true;
    d.port = 0;
    return caf::none;
  } catch (const std::exception& e) {
    if (store)
      store->close();
    return d.fail(from_exception(e, d.where() + ": forming the group failed"));
  }
}

std::uint16_t learner_group::store_port() const noexcept {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->port;
}

const learner_group_config& learner_group::config() const noexcept {
  return impl_->cfg;
}

int learner_group::rank() const noexcept {
  return impl_->cfg.rank;
}

int learner_group::size() const noexcept {
  return impl_->cfg.size;
}

std::uint64_t learner_group::generation() const noexcept {
  return impl_->cfg.generation;
}

bool learner_group::ready() const noexcept {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->joined && !impl_->broken;
}

caf::error learner_group::failure() const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->broken;
}

caf::error learner_group::all_reduce_gradients(torch::nn::Module& m) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (d.cfg.size == 1)
    return caf::none;
  std::vector<at::Tensor> grads;
  try {
    torch::NoGradGuard no_grad;
    grads = gradients(m);
    for (auto& g : grads)
      if (!g.device().is_cpu())
        return make_error(errc::model_mismatch,
                          d.where() + ": gradients must be on the CPU");
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch, d.where() + ": " + e.what());
  }
  auto layout = layout_signature(grads);
  if (!d.layout_checked || d.checked_layout != layout) {
    auto all = all_gather(layout);
    if (!all)
      return all.error();
    for (int r = 0; r < d.cfg.size; ++r)
      if ((*all)[r] != layout)
        return d.fail(make_error(errc::model_mismatch,
                                 d.where() + ": rank " + std::to_string(r)
                                   + " has another parameter layout"));
    d.layout_checked = true;
    d.checked_layout = layout;
    d.buffers.clear();
  }
  auto limit = d.cfg.mode == reduce_mode::flat
    ? std::numeric_limits<std::size_t>::max()
    : d.cfg.bucket_bytes;
  auto buckets = make_buckets(grads, limit);
  if (d.buffers.size() != buckets.size())
    d.buffers.assign(buckets.size(), at::Tensor{});
  auto size = d.cfg.size;
  torch::NoGradGuard no_grad;
  // A bucket of one contiguous gradient is reduced in place; others are
  // copied into a flat buffer (kept between steps) and back.
  auto in_place = [&](const bucket& b) {
    return b.last - b.first == 1 && grads[b.first].is_contiguous();
  };
  auto launch = [&](std::size_t i) {
    auto& b = buckets[i];
    std::vector<at::Tensor> ts;
    if (in_place(b)) {
      ts.push_back(grads[b.first]);
    } else {
      auto& buf = d.buffers[i];
      if (!buf.defined() || buf.numel() != b.numel
          || buf.scalar_type() != grads[b.first].scalar_type())
        buf = torch::empty({b.numel}, grads[b.first].options());
      std::int64_t off = 0;
      for (auto k = b.first; k < b.last; ++k) {
        auto n = grads[k].numel();
        buf.narrow(0, off, n).view_as(grads[k]).copy_(grads[k]);
        off += n;
      }
      ts.push_back(buf);
    }
    return (*pg)->allreduce(ts);
  };
  if (auto err = d.run_works(buckets.size(), launch, "all-reduce"))
    return err;
  try {
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      auto& b = buckets[i];
      if (in_place(b)) {
        grads[b.first].div_(size);
        continue;
      }
      auto& buf = d.buffers[i];
      buf.div_(size);
      std::int64_t off = 0;
      for (auto k = b.first; k < b.last; ++k) {
        auto n = grads[k].numel();
        grads[k].copy_(buf.narrow(0, off, n).view_as(grads[k]));
        off += n;
      }
    }
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch, d.where() + ": " + e.what());
  }
  return caf::none;
}

caf::error learner_group::broadcast_parameters(torch::nn::Module& m, int root) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (root < 0 || root >= d.cfg.size)
    return make_error(errc::invalid_config,
                      d.where() + ": no rank " + std::to_string(root));
  if (d.cfg.size == 1)
    return caf::none;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> xs;
  for (auto& p : m.parameters(true))
    xs.push_back(p);
  for (auto& b : m.buffers(true))
    xs.push_back(b);
  for (auto& x : xs)
    if (!x.device().is_cpu())
      return make_error(errc::model_mismatch,
                        d.where() + ": parameters must be on the CPU");
  // One flat buffer per run of one dtype: a handful of broadcasts, not one
  // per tensor.
  auto buckets = make_buckets(xs, std::numeric_limits<std::size_t>::max());
  std::vector<at::Tensor> flats(buckets.size());
  auto launch = [&](std::size_t i) {
    auto& b = buckets[i];
    std::vector<at::Tensor> parts;
    for (auto k = b.first; k < b.last; ++k)
      parts.push_back(xs[k].reshape({-1}));
    flats[i] = torch::cat(parts);
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    std::vector<at::Tensor> ts{flats[i]};
    return (*pg)->broadcast(ts, opts);
  };
  if (auto err = d.run_works(buckets.size(), launch, "broadcast"))
    return err;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    std::int64_t off = 0;
    for (auto k = buckets[i].first; k < buckets[i].last; ++k) {
      auto n = xs[k].numel();
      xs[k].copy_(flats[i].narrow(0, off, n).view_as(xs[k]));
      off += n;
    }
  }
  return caf::none;
}

caf::error learner_group::broadcast_optimizer(torch::optim::Optimizer& opt,
                                              int root) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (root < 0 || root >= d.cfg.size)
    return make_error(errc::invalid_config,
                      d.where() + ": no rank " + std::to_string(root));
  if (d.cfg.size == 1)
    return caf::none;
  std::string bytes;
  if (d.cfg.rank == root) {
    try {
      torch::serialize::OutputArchive archive;
      opt.save(archive);
      std::ostringstream out;
      archive.save_to(out);
      bytes = out.str();
    } catch (const std::exception& e) {
      return make_error(errc::user_exception,
                        d.where() + ": saving the optimizer: " + e.what());
    }
  }
  auto len = torch::full({1}, static_cast<std::int64_t>(bytes.size()),
                         torch::kInt64);
  at::Tensor data;
  auto launch = [&](std::size_t i) {
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    std::vector<at::Tensor> ts;
    if (i == 0) {
      ts.push_back(len);
    } else {
      data = torch::empty({len.item<std::int64_t>()}, torch::kUInt8);
      if (d.cfg.rank == root)
        std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
      ts.push_back(data);
    }
    return (*pg)->broadcast(ts, opts);
  };
  // Two steps: the length must arrive before the buffer is sized.
  if (auto err = d.run_works(1, launch, "optimizer broadcast"))
    return err;
  if (auto err = d.run_works(
        1,
        [&](std::size_t) {
          return launch(1);
        },
        "optimizer broadcast"))
    return err;
  if (d.cfg.rank == root)
    return caf::none;
  try {
    std::istringstream in{
      std::string{reinterpret_cast<const char*>(data.data_ptr()),
                  static_cast<std::size_t>(data.numel())}};
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    opt.load(archive);
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch,
                      d.where() + ": loading the optimizer: " + e.what());
  }
  return caf::none;
}

caf::error learner_group::all_reduce_sum(std::vector<double>& xs) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (d.cfg.size == 1 || xs.empty())
    return caf::none;
  auto t = torch::from_blob(xs.data(), {static_cast<std::int64_t>(xs.size())},
                            torch::kFloat64);
  auto launch = [&](std::size_t) {
    std::vector<at::Tensor> ts{t};
    return (*pg)->allreduce(ts);
  };
  return d.run_works(1, launch, "sum");
}

caf::expected<std::vector<std::int64_t>>
learner_group::all_gather(std::int64_t x) {
  auto& d = *impl_;
  auto pg = d.acquire();
  if (!pg)
    return pg.error();
  if (d.cfg.size == 1)
    return std::vector<std::int64_t>{x};
  std::vector<at::Tensor> in{torch::full({1}, x, torch::kInt64)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < d.cfg.size; ++r)
    out[0].push_back(torch::empty({1}, torch::kInt64));
  auto launch = [&](std::size_t) {
    return (*pg)->allgather(out, in);
  };
  if (auto err = d.run_works(1, launch, "all-gather"))
    return err;
  std::vector<std::int64_t> result;
  for (auto& t : out[0])
    result.push_back(t.item<std::int64_t>());
  return result;
}

caf::error learner_group::verify_identical(const torch::nn::Module& m) {
  auto digest = parameters_digest(m);
  if (!digest)
    return digest.error();
  auto all = all_gather(static_cast<std::int64_t>(*digest));
  if (!all)
    return all.error();
  std::string differ;
  for (std::size_t r = 1; r < all->size(); ++r)
    if ((*all)[r] != (*all)[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (differ.empty())
    return caf::none;
  return make_error(errc::model_mismatch,
                    impl_->where() + ": parameters of rank(s) " + differ
                      + " differ from rank 0");
}

void learner_group::abort() {
  impl_->fail(make_error(errc::finished, impl_->where() + ": aborted"));
  std::lock_guard<std::mutex> guard{impl_->mtx};
  impl_->server.reset();
  impl_->port = 0;
}

caf::expected<std::uint64_t> parameters_digest(const torch::nn::Module& m) {
  try {
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    auto add = [&](const std::string& name, const at::Tensor& t) {
      auto x = t.device().is_cpu() ? t.contiguous() : t.cpu().contiguous();
      XXH3_64bits_update(&state, name.data(), name.size() + 1);
      auto type = static_cast<std::int64_t>(x.scalar_type());
      XXH3_64bits_update(&state, &type, sizeof(type));
      auto dims = x.sizes();
      XXH3_64bits_update(&state, dims.data(), dims.size() * sizeof(dims[0]));
      XXH3_64bits_update(&state, x.data_ptr(), x.numel() * x.element_size());
    };
    for (auto& kv : m.named_parameters(true))
      add(kv.key(), kv.value());
    for (auto& kv : m.named_buffers(true))
      add(kv.key(), kv.value());
    return XXH3_64bits_digest(&state);
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch,
                      std::string{"parameters_digest: "} + e.what());
  }
}

} // namespace dice
