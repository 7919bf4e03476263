// Recording a learner's train stage, and running it again alone from the
// record (record.hpp, docs/replay.md).

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/rl/record.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <sstream>

namespace dice::rl {

namespace {

std::string hex(std::uint64_t x) {
  std::ostringstream os;
  os << std::hex << x;
  return os.str();
}

struct record_state {
  middleware inner;
  std::shared_ptr<record_writer> w;
  std::shared_ptr<torch::nn::Module> net;
  std::uint32_t node = 0;
  bool active = true;
  // What recording cost the learner: seconds hashing, encoding, writing.
  double seconds = 0;
  std::uint64_t deltas = 0;
  std::uint64_t iterations = 0;

  void fail(const std::string& why) {
    log::error(node,
               "--dice.record stops: " + why + " (" + w->path()
                 + " is incomplete; replay refuses it)");
    active = false;
  }
};

} // namespace

middleware record_learner(middleware train, std::shared_ptr<record_writer> w,
                          std::shared_ptr<torch::nn::Module> net) {
  auto st = std::make_shared<record_state>();
  st->w = std::move(w);
  st->net = std::move(net);
  middleware m;
  m.name = train.name;
  st->inner = std::move(train);
  m.attach = [st](node_services& svc) {
    st->node = svc.node_id();
    if (st->inner.attach)
      st->inner.attach(svc);
  };
  m.before = [st](context& ctx) -> step {
    recorded_iteration x;
    if (st->active) {
      // The inputs as the stage sees them (payloads share their bytes).
      x.total_step = ctx.total_step;
      x.env_step = ctx.env_step;
      x.env_episode = ctx.env_episode;
      x.train_iter = ctx.train_iter;
      x.model_version = ctx.model_version;
      x.trajectories = ctx.trajectories;
      x.episodes = ctx.episodes;
      x.trajectory_end_idx = ctx.trajectory_end_idx;
      x.deltas = ctx.merged_deltas;
    }
    step s = st->inner.before ? st->inner.before(ctx) : proceed;
    if (!st->active)
      return s;
    if (s) {
      // A stage that waits would continue in another iteration of the
      // actor: not what replay drives.
      st->fail("the train stage waits, which replay cannot follow");
      return s;
    }
    auto t0 = std::chrono::steady_clock::now();
    x.train_iter_after = ctx.train_iter;
    x.weights_hash = weights_hash(*st->net);
    bool was_cut = st->w->cut();
    auto err = st->w->iteration(x);
    st->seconds += std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
    if (err) {
      st->fail(render(err));
      return s;
    }
    if (!st->w->cut()) {
      st->deltas += x.deltas.size();
      ++st->iterations;
    }
    if (st->w->cut() && !was_cut) {
      log::warning(st->node,
                   "--dice.record-max-bytes reached: " + st->w->path()
                     + " ends at iteration " + std::to_string(ctx.total_step)
                     + " (" + std::to_string(st->w->bytes())
                     + " bytes); the run goes on unrecorded");
      st->active = false;
    }
    return s;
  };
  m.after = [st](context& ctx) {
    if (st->inner.after)
      st->inner.after(ctx);
  };
  m.on_stop = [st](context& ctx) {
    if (st->inner.on_stop)
      st->inner.on_stop(ctx);
    if (st->w->finished() || !st->active)
      return;
    if (auto err = st->w->finish()) {
      st->fail(render(err));
      return;
    }
    log::info(st->node,
              "record: " + std::to_string(st->iterations) + " iterations, "
                + std::to_string(st->deltas) + " deltas, "
                + std::to_string(st->w->bytes()) + " bytes in " + st->w->path()
                + ", " + std::to_string(st->seconds) + " s spent recording");
  };
  return m;
}

middleware record_train(middleware train, const std::string& dir,
                        std::uint64_t max_bytes, record_start start,
                        std::shared_ptr<torch::nn::Module> net) {
  auto w = record_writer::create(dir, max_bytes);
  if (!w)
    throw std::runtime_error("--dice.record: " + render(w.error()));
  start.threads = torch::get_num_threads();
  if (auto err = (*w)->start(std::move(start), *net))
    throw std::runtime_error("--dice.record: " + render(err));
  return record_learner(std::move(train), std::move(*w), std::move(net));
}

// -- replay -------------------------------------------------------------------

namespace {

// The node services of a learner that runs alone from its record: no peers,
// no loaders, the machine's clock; the run finishes after the record's last
// iteration.
class replay_services : public node_services {
 public:
  explicit replay_services(std::uint32_t node) : node_(node) {
    // nop
  }

  std::uint32_t node_id() const override {
    return node_;
  }

  role_set roles() const override {
    return role_set{role::learner};
  }

  std::uint64_t incarnation() const override {
    return 1;
  }

  caf::actor_clock::time_point now() const override {
    return caf::actor_clock::clock_type::now();
  }

  bool finished() const override {
    return finished_;
  }

  bool failing() const override {
    return false;
  }

  // The record, not the learner, says when the run ends.
  void request_finish(std::string) override {
    // nop
  }

  void add_to_report(report_counter, std::int64_t) override {
    // nop
  }

  void flush_before_done(const storage_loader_actor&) override {
    unsupported("loaders");
  }

  void flush_before_done(const model_loader_actor&) override {
    unsupported("loaders");
  }

  void store(const storage_loader_actor&, context_delta,
             std::vector<std::string>) override {
    unsupported("loaders");
  }

  void store(const model_loader_actor&, model_snapshot,
             std::vector<std::string>) override {
    unsupported("loaders");
  }

  void load(const storage_loader_actor&, const storage_ref&,
            const std::string&) override {
    unsupported("loaders");
  }

  void load(const model_loader_actor&, const storage_ref&,
            const std::string&) override {
    unsupported("loaders");
  }

  void quit_when(std::function<bool()>) override {
    // Nothing to drain: no peers.
  }

  void schedule(caf::timespan, std::function<void()>) override {
    unsupported("timers");
  }

  void on_peer_event(peer_handler) override {
    // No peers, so no events.
  }

  void finish() {
    finished_ = true;
  }

 protected:
  void subscribe_erased(const std::string&, erased_handler) override {
    // No peers publish.
  }

  void publish_erased(const std::string&, caf::message) override {
    // No peers listen.
  }

 private:
  // A train stage that needs the cluster's machinery cannot be replayed
  // alone: say so instead of running it differently.
  [[noreturn]] void unsupported(const char* what) {
    throw std::runtime_error(std::string{"replay: the learner alone has no "}
                             + what);
  }

  std::uint32_t node_;
  bool finished_ = false;
};

} // namespace

caf::error prepare_replay(const learner_record& rec, const std::string& algo,
                          const std::string& options, torch::nn::Module& net) {
  if (rec.start.algo != algo)
    return make_error(errc::invalid_config,
                      "the record is of a " + rec.start.algo + " learner, not "
                        + algo);
  if (rec.start.options != options) {
    auto want = nlohmann::json::parse(rec.start.options, nullptr, false);
    auto have = nlohmann::json::parse(options, nullptr, false);
    std::string which = "the options";
    if (want.is_object() && have.is_object())
      for (auto& [k, v] : want.items())
        if (!have.contains(k) || have[k] != v) {
          which = k + " (recorded " + v.dump() + ", given "
            + (have.contains(k) ? have[k].dump() : "none") + ")";
          break;
        }
    return make_error(errc::invalid_config,
                      "replay needs the recorded run's options: " + which);
  }
  try {
    std::istringstream in{rec.weights};
    torch::serialize::InputArchive ar;
    ar.load_from(in);
    net.load(ar);
  } catch (const std::exception& e) {
    return make_error(errc::model_mismatch,
                      std::string{"cannot load the recorded weights: "}
                        + e.what());
  }
  auto h = weights_hash(net);
  if (h != rec.start.weights_hash)
    return make_error(errc::model_mismatch,
                      "the recorded initial weights hash to " + hex(h)
                        + ", the record says " + hex(rec.start.weights_hash));
  // The same CPU kernels split the same way: floats come out the same.
  torch::set_num_threads(std::max(rec.start.threads, 1));
  return caf::none;
}

caf::expected<replay_report> replay_learner(const learner_record& rec,
                                            middleware train,
                                            torch::nn::Module& net) {
  replay_report rep;
  rep.bytes = rec.bytes;
  rep.cut = rec.cut;
  rep.hashes_checked = 1; // the initial weights (prepare_replay)
  replay_services svc{rec.start.node};
  auto t0 = std::chrono::steady_clock::now();
  try {
    if (train.attach)
      train.attach(svc);
    context ctx;
    for (auto& it : rec.iterations) {
      ctx.total_step = it.total_step;
      ctx.env_step = it.env_step;
      ctx.env_episode = it.env_episode;
      ctx.train_iter = it.train_iter;
      ctx.model_version = it.model_version;
      ctx.trajectories = it.trajectories;
      ctx.episodes = it.episodes;
      ctx.trajectory_end_idx = it.trajectory_end_idx;
      ctx.merged_deltas = it.deltas;
      if (train.before && train.before(ctx))
        return make_error(errc::invalid_config,
                          "replay: the train stage waits at iteration "
                            + std::to_string(it.total_step));
      if (train.after)
        train.after(ctx);
      auto h = weights_hash(net);
      if (h != it.weights_hash || ctx.train_iter != it.train_iter_after)
        return make_error(
          errc::model_mismatch,
          "replay diverged at iteration " + std::to_string(it.total_step)
            + " (the weights of published version "
            + std::to_string(std::max<std::int64_t>(it.model_version, 0) + 1)
            + "): weights hash " + hex(h) + ", recorded " + hex(it.weights_hash)
            + "; train_iter " + std::to_string(ctx.train_iter) + ", recorded "
            + std::to_string(it.train_iter_after));
      ++rep.hashes_checked;
      ++rep.iterations;
      rep.deltas += it.deltas.size();
      ctx.renew();
    }
    svc.finish();
    if (train.on_stop)
      train.on_stop(ctx);
  } catch (const std::exception& e) {
    return make_error(errc::invalid_config, e.what());
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - t0)
                  .count();
  rep.final_hash = weights_hash(net);
  return rep;
}

} // namespace dice::rl
