#pragma once

// A data-parallel group of learners on LibTorch's c10d (ProcessGroupGloo and
// a TCPStore rendezvous hosted by rank 0). The collectives are c10d's own;
// this class forms the group, averages gradients, keeps parameters identical,
// and turns every c10d exception into a `caf::error`. LibTorch's distributed
// headers stay inside learner_group.cpp (pimpl).

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch {
namespace nn {
class Module;
} // namespace nn
namespace optim {
class Optimizer;
} // namespace optim
} // namespace torch

namespace dice {

/// How `all_reduce_gradients` moves the gradient.
enum class reduce_mode : std::uint8_t {
  /// Several flat buckets of at most `bucket_bytes` each, in flight together
  /// (a gradient larger than a bucket is reduced in place, uncopied).
  bucketed,
  /// One flat buffer holding the whole gradient, one all-reduce.
  flat,
  /// Every rank sends its whole gradient to every other rank, in one
  /// message over the group's own proven connections that the calling
  /// thread writes and reads itself, and sums all ranks' in rank order: one
  /// message latency instead of the ring's 2 (L-1), and no thread hand-off.
  /// Each rank moves (L-1) x the gradient, the ring 2 (L-1)/L x: equal at
  /// L = 2, more above.
  exchange,
  /// `exchange` at L = 2 or for a gradient of at most `bucket_bytes`
  /// (latency-bound), else `bucketed` (moves less at L > 2).
  automatic,
};

/// "bucketed", "flat", "exchange" or "automatic".
std::string to_string(reduce_mode x);

/// A key-value store for forming a group, in place of rank 0's TCPStore:
/// e.g. one carried over dice's authenticated router. Errors are values; the
/// group turns them into a failed `join()`.
class rendezvous_store {
 public:
  virtual ~rendezvous_store();

  /// Stores `value` under `key`, replacing an older one.
  virtual caf::error set(const std::string& key,
                         std::vector<std::uint8_t> value)
    = 0;

  /// The value under `key`, waiting until it exists or `timeout` passes
  /// (`errc::timeout`); a zero timeout only looks.
  virtual caf::expected<std::vector<std::uint8_t>>
  get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  /// Adds `delta` to the counter under `key` (0 if absent); the new value.
  virtual caf::expected<std::int64_t>
  add(const std::string& key, std::int64_t delta) = 0;
};

/// Where and how one learner joins its group.
struct learner_group_config {
  /// This learner's rank in 0..size-1. Rank 0 hosts the rendezvous store.
  int rank = 0;
  /// Number of learners in the group.
  int size = 1;
  /// Address of rank 0's rendezvous store; rank 0 listens there.
  std::string store_host = "127.0.0.1";
  /// Port of the store; rank 0 may pass 0 to get a free one (`store_port()`).
  std::uint16_t store_port = 0;
  /// This learner's own address: Gloo binds its connections to it.
  std::string address = "127.0.0.1";
  /// Counts re-formations; keys in the store are prefixed with it, so a
  /// learner of an older generation can never join a newer group.
  std::uint64_t generation = 0;
  /// Deadline for forming the group (all ranks at the store, all connected);
  /// at least 1 s (TCPStore counts its connect deadline in whole seconds).
  std::chrono::milliseconds join_timeout{30000};
  /// Deadline for each collective: a rank that stops answering ends the
  /// step on every other rank with `errc::timeout` after this long.
  std::chrono::milliseconds timeout{10000};
  /// How gradients are all-reduced.
  reduce_mode mode = reduce_mode::automatic;
  /// Largest bucket (`bucketed`) or message (`exchange`).
  std::size_t bucket_bytes = std::size_t{4} << 20;
  /// Gloo worker threads; also the number of buckets in flight at once.
  int threads = 2;
  /// If set, the group forms through this store (shared by all ranks'
  /// configs) and no TCPStore is opened; `store_host`/`store_port` unused.
  std::shared_ptr<rendezvous_store> store;
  /// The cluster secret: once connected, every pair of ranks proves with it
  /// (HMAC-SHA256 over fresh nonces) that both ends are members, before
  /// `join()` succeeds; a failed proof is `errc::handshake_failed` on every
  /// rank. Empty: no proof (a cluster without a secret is loopback-only).
  std::string secret;
  /// `reduce_mode::exchange` between ranks on one host: messages up to 1 MiB
  /// go through shared memory instead of the loopback socket (a pair uses it
  /// only if both ranks have it on and can map each other's segment).
  bool shared_memory = true;
};

/// One learner's membership in a data-parallel group. Use it from one
/// thread; `abort()` may come from any thread. After the first failed
/// collective the group is broken: every later call returns an error
/// without blocking, and the survivors form a new generation.
class learner_group {
 public:
  /// Checks `cfg`; rank 0 also starts its rendezvous store here, so that
  /// `store_port()` can be handed to the other ranks before `join()`.
  static caf::expected<learner_group> create(learner_group_config cfg);

  /// `create` and `join` in one call (for ranks other than 0, or a rank 0
  /// whose store port is fixed).
  static caf::expected<learner_group> form(learner_group_config cfg);

  /// The config that a survivor uses for the next generation: `survivors`
  /// are the old ranks still alive (any order); the lowest becomes rank 0
  /// and hosts a new store (port 0: the caller passes the new rank 0's
  /// `store_port()` and address on to the others).
  static caf::expected<learner_group_config>
  next_generation(const learner_group_config& old, std::vector<int> survivors);

  learner_group(learner_group&&) noexcept;
  learner_group& operator=(learner_group&&) noexcept;
  ~learner_group();

  /// Blocks until all ranks are connected (or `join_timeout`) and, with a
  /// `secret`, every pair proved membership; then closes the rendezvous
  /// store: it listens only while the group forms.
  caf::error join();

  /// The port rank 0's store listens on (0 on other ranks, or once closed).
  std::uint16_t store_port() const noexcept;

  /// The config this group was created with.
  const learner_group_config& config() const noexcept;

  /// This learner's rank.
  int rank() const noexcept;

  /// The group's size.
  int size() const noexcept;

  /// The generation this group was formed for.
  std::uint64_t generation() const noexcept;

  /// True once joined and not broken.
  bool ready() const noexcept;

  /// The error that broke the group (none while it works).
  caf::error failure() const;

  /// Averages the gradients of `m`'s trainable parameters over all ranks,
  /// in place (undefined gradients count as zeros and become defined).
  /// The first call also checks that every rank has the same layout.
  caf::error all_reduce_gradients(torch::nn::Module& m);

  /// Copies parameters and buffers of `m` from rank `root` to every rank.
  caf::error broadcast_parameters(torch::nn::Module& m, int root = 0);

  /// Copies the state of `opt` (e.g. Adam's moments) from rank `root`.
  caf::error broadcast_optimizer(torch::optim::Optimizer& opt, int root = 0);

  /// Sums `xs` element-wise over all ranks, in place (counters, metrics).
  caf::error all_reduce_sum(std::vector<double>& xs);

  /// Each rank's `x`, indexed by rank (e.g. steps completed, to pick the
  /// broadcast root after a re-formation).
  caf::expected<std::vector<std::int64_t>> all_gather(std::int64_t x);

  /// Compares `parameters_digest(m)` across ranks: `errc::model_mismatch`
  /// names the ranks that differ from rank 0.
  caf::error verify_identical(const torch::nn::Module& m);

  /// Ends this learner's membership now: later calls fail with
  /// `errc::finished`, and peers see the closed connections. Returns once
  /// no collective of this learner is queued (at most about `timeout`).
  void abort();

 private:
  struct impl;

  explicit learner_group(std::unique_ptr<impl> ptr);

  std::unique_ptr<impl> impl_;
};

/// XXH3-64 over the names, dtypes, shapes and raw bytes of `m`'s parameters
/// and buffers: equal digests mean bitwise equal models (up to collisions).
caf::expected<std::uint64_t> parameters_digest(const torch::nn::Module& m);

} // namespace dice
