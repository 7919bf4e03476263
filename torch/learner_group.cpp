#include "dice/torch/learner_group.hpp"

#include "learner_group_impl.hpp"
#include <gloo/context.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <thread>

namespace dice::detail {

void breakable_gloo::break_connections() {
  // Debian's libgloo-dev lacks gloo/common/memory.h, which tcp/pair.h needs,
  // so the pairs are closed through the transport-neutral interface: the
  // peers see a reset at once; this rank's own pending operations are
  // abandoned by the caller.
  for (auto& ctx : contexts_)
    if (ctx)
      ctx->closeConnections();
}

namespace {

// Joins the burying threads at exit, so that none outlives the statics.
struct graveyard {
  std::mutex mtx;
  std::vector<std::thread> threads;
  ~graveyard() {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& t : threads)
      t.join();
  }
};

graveyard& the_graveyard() {
  static graveyard g;
  return g;
}

} // namespace

void bury(pg_ptr pg, std::vector<c10::intrusive_ptr<c10d::Work>> works) {
  auto& g = the_graveyard();
  std::lock_guard<std::mutex> guard{g.mtx};
  g.threads.emplace_back(
    [pg = std::move(pg), works = std::move(works)]() mutable {
      for (auto& w : works) {
        try {
          w->wait();
        } catch (const std::exception&) {
          // Expected: the connections were broken under it.
        }
      }
      works.clear();
      pg.reset(); // joins Gloo's worker threads
    });
}

} // namespace dice::detail

namespace dice {

using detail::closable_store;
using detail::from_exception;
using detail::pg_ptr;

namespace {

// Connects the exchange links of `cfg`'s rank through `store`, then all ranks
// learn every rank's outcome over the (proven) Gloo group, so that all fail
// together: a rank whose links failed must not leave the others waiting
// for a step that will never come.
caf::expected<detail::links_ptr> form_links(const learner_group_config& cfg,
                                            const std::string& where,
                                            c10d::Store& store,
                                            c10d::ProcessGroupGloo& pg) {
  caf::expected<detail::links_ptr> links{caf::error{}};
  try {
    links = detail::exchange_links::connect(
      cfg,
      [&](const std::string& key, const std::string& value) {
        store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
      },
      [&](const std::string& key) {
        store.wait({key}, cfg.join_timeout);
        auto v = store.get(key);
        return std::string(v.begin(), v.end());
      },
      where);
  } catch (const std::exception& e) {
    links = from_exception(e, where + ": exchange links failed");
  }
  std::vector<at::Tensor> failed{
    torch::full({1}, links ? 0.0f : 1.0f, torch::kFloat)};
  pg.allreduce(failed)->wait();
  if (!links)
    return links;
  if (auto n = failed[0].item<float>(); n > 0)
    return make_error(errc::handshake_failed,
                      where + ": exchange links failed on "
                        + std::to_string(static_cast<int>(n))
                        + " other rank(s); the group is torn down");
  return links;
}

} // namespace

std::string to_string(reduce_mode x) {
  switch (x) {
    case reduce_mode::flat: return "flat";
    case reduce_mode::exchange: return "exchange";
    case reduce_mode::automatic: return "automatic";
    default: return "bucketed";
  }
}

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
      base = detail::adapt_store(c.store, c.join_timeout);
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
    opts->threads = c.threads;
    pg_ptr pg;
    {
      // Gloo writes to peers from threads created here and expects EPIPE
      // from a dead peer (Python ignores SIGPIPE; a C++ program may not):
      // those threads inherit a mask that blocks SIGPIPE. Defensive: no
      // test has provoked a SIGPIPE (Gloo's loop saw every close first).
      detail::sigpipe_blocked guard;
      opts->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(c.address));
      pg = c10::make_intrusive<detail::breakable_gloo>(prefixed, c.rank, c.size,
                                                       opts);
    }
    // Everyone is connected once this completes, so nobody reads the store
    // any more and it can close.
    std::vector<at::Tensor> one{torch::ones({1})};
    pg->allreduce(one)->wait();
    if (one[0].item<float>() != static_cast<float>(c.size))
      return d.fail(
        make_error(errc::handshake_failed, d.where() + ": group incomplete"));
    // Gloo's pairs take whoever connects first: before any gradient is
    // reduced, every pair proves that its other end holds the secret.
    if (!c.secret.empty()) {
      if (auto err = detail::prove_pairs(*pg, c, d.where())) {
        if (store)
          store->close();
        pg->break_connections(); // peers still waiting fail at once
        detail::bury(std::move(pg), {});
        return d.fail(std::move(err));
      }
    }
    // The exchange's own connections, through the same store and proven
    // with the same secret (see form_links).
    auto links = form_links(c, d.where(), *prefixed, *pg);
    if (store)
      store->close();
    if (!links) {
      pg->break_connections();
      detail::bury(std::move(pg), {});
      return d.fail(std::move(links.error()));
    }
    std::lock_guard<std::mutex> guard{d.mtx};
    if (d.broken) // aborted meanwhile
      return d.broken;
    d.links = std::move(*links);
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

void learner_group::abort() {
  impl_->fail(make_error(errc::finished, impl_->where() + ": aborted"), {},
              true);
  std::lock_guard<std::mutex> guard{impl_->mtx};
  impl_->server.reset();
  impl_->port = 0;
}

} // namespace dice
