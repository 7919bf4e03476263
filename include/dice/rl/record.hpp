#pragma once

// A learner's record (--dice.record=DIR) and its replay (--dice.replay=DIR):
// what an asynchronous learner applied, in order, so that the learner alone
// can run again from it and reach the same weights bit for bit
// (docs/replay.md). The file DIR/learner.rec is a header (magic, version,
// XXH3 of both) and append-only entries, each kind | length | XXH3 | payload
// like the context spool's records: a start entry (algorithm, seed, node,
// LibTorch threads, the options, the initial weights' hash), the initial
// weights, one entry per learner iteration (the context the train stage
// saw: counters, model version, the merged trajectories and episodes, which
// deltas they came from, and the weights' hash after the iteration) and an
// end entry. Reading checks every byte and refuses a truncated or altered
// record naming the file and the byte offset.

#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"
#include "caf/meta/type_name.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dice {

/// Serializes a merged_delta (record entries).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, merged_delta& x) {
  return f(caf::meta::type_name("dice::merged_delta"), x.sender, x.incarnation,
           x.seq, x.model_version);
}

} // namespace dice

namespace dice::rl {

/// What a record says about the run it was made of (its start entry).
struct record_start {
  /// "dqn" or "ppo".
  std::string algo;
  /// The run's --seed (the learner's sampling RNG derives from it).
  std::uint64_t seed = 0;
  /// The learner's node id.
  std::uint32_t node = 0;
  /// LibTorch intra-op threads of the learner's process.
  std::int32_t threads = 1;
  /// The algorithm's options as JSON (replay refuses other options).
  std::string options;
  /// Hash of the initial weights (weights_hash).
  std::uint64_t weights_hash = 0;
};

/// Serializes a record_start.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, record_start& x) {
  return f(caf::meta::type_name("dice::rl::record_start"), x.algo, x.seed,
           x.node, x.threads, x.options, x.weights_hash);
}

/// One learner iteration as its train stage saw it, and what it made.
struct recorded_iteration {
  /// ctx.total_step.
  std::int64_t total_step = 0;
  /// ctx.env_step when the train stage began.
  std::int64_t env_step = 0;
  /// ctx.env_episode when the train stage began.
  std::int64_t env_episode = 0;
  /// ctx.train_iter when the train stage began.
  std::int64_t train_iter = 0;
  /// ctx.model_version: the version the learner had published last.
  std::int64_t model_version = -1;
  /// The merged trajectories.
  std::vector<payload> trajectories;
  /// The merged episodes.
  std::vector<payload> episodes;
  /// The merged trajectory ends.
  std::vector<std::int64_t> trajectory_end_idx;
  /// The deltas merged into this iteration, in the order they were applied.
  std::vector<merged_delta> deltas;
  /// ctx.train_iter when the train stage returned.
  std::int64_t train_iter_after = 0;
  /// Hash of the weights after the stage: what the learner publishes next.
  std::uint64_t weights_hash = 0;
};

/// Serializes a recorded_iteration.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, recorded_iteration& x) {
  return f(caf::meta::type_name("dice::rl::recorded_iteration"), x.total_step,
           x.env_step, x.env_episode, x.train_iter, x.model_version,
           x.trajectories, x.episodes, x.trajectory_end_idx, x.deltas,
           x.train_iter_after, x.weights_hash);
}

/// A record as read back, every byte checked.
struct learner_record {
  /// The start entry.
  record_start start;
  /// The initial weights (LibTorch's archive bytes).
  std::string weights;
  /// Every iteration, in order.
  std::vector<recorded_iteration> iterations;
  /// Recording stopped at --dice.record-max-bytes (the run went on).
  bool cut = false;
  /// Size of the file.
  std::uint64_t bytes = 0;
};

/// XXH3 of every parameter and buffer of `m` (names, shapes and bytes, in
/// the module's order): equal hashes, bit-identical weights.
std::uint64_t weights_hash(torch::nn::Module& m);

/// Writes DIR/learner.rec (see the top of this header). Not thread-safe: the
/// learner's role actor alone writes.
class record_writer {
 public:
  /// The record's file name inside its directory.
  static constexpr const char* file_name = "learner.rec";

  /// Creates DIR (and parents) and DIR/learner.rec; an existing record is
  /// never overwritten (errc::invalid_config). `max_bytes` bounds the file
  /// (0: unbounded).
  static caf::expected<std::unique_ptr<record_writer>>
  create(const std::string& dir, std::uint64_t max_bytes);

  ~record_writer();

  record_writer(const record_writer&) = delete;
  record_writer& operator=(const record_writer&) = delete;

  /// Writes the start entry and the initial weights of `m`.
  caf::error start(record_start x, torch::nn::Module& m);

  /// Appends one iteration; once the next entry would pass max_bytes it
  /// writes the end entry marked as cut instead and records nothing more
  /// (`cut()` turns true).
  caf::error iteration(const recorded_iteration& x);

  /// Writes the end entry (once; later calls do nothing).
  caf::error finish();

  /// True once max_bytes ended the recording.
  bool cut() const noexcept {
    return cut_;
  }

  /// True once the end entry is written.
  bool finished() const noexcept {
    return finished_;
  }

  /// Bytes written so far.
  std::uint64_t bytes() const noexcept {
    return bytes_;
  }

  /// Path of the file.
  const std::string& path() const noexcept {
    return path_;
  }

 private:
  record_writer(std::string path, std::FILE* f, std::uint64_t max_bytes);

  friend caf::error write_record(const std::string& dir,
                                 const learner_record& rec);

  caf::error write_entry(std::uint32_t kind, const std::vector<char>& payload);
  caf::error write_end(bool cut);

  std::string path_;
  std::FILE* file_;
  std::uint64_t max_bytes_;
  std::uint64_t bytes_ = 0;
  std::uint64_t iterations_ = 0;
  bool cut_ = false;
  bool finished_ = false;
};

/// Reads and checks DIR/learner.rec: a missing file is errc::storage_missing;
/// a bad header, a truncated or altered entry, entries out of order or a
/// record without its end entry are errc::malformed_input naming the file
/// and the byte offset.
caf::expected<learner_record> read_record(const std::string& dir);

/// Rewrites `rec` as a record in `dir` (tests alter records with it).
caf::error write_record(const std::string& dir, const learner_record& rec);

/// Wraps a learner's train stage: every iteration it writes what the stage
/// saw and the hash of `net`'s weights after it to `w`, and the end entry at
/// stop. A write that fails is logged and ends the recording (the run goes
/// on).
middleware record_learner(middleware train, std::shared_ptr<record_writer> w,
                          std::shared_ptr<torch::nn::Module> net);

/// The learner's train stage `train` on `net`, recorded to DIR/learner.rec
/// (`dir`, at most `max_bytes`, 0: unbounded): creates the record, writes
/// `start` and `net`'s weights (they must be the initial ones) and wraps the
/// stage with record_learner. Throws std::runtime_error when the record
/// cannot be made (an existing one is never overwritten).
middleware record_train(middleware train, const std::string& dir,
                        std::uint64_t max_bytes, record_start start,
                        std::shared_ptr<torch::nn::Module> net);

/// What a replay did.
struct replay_report {
  /// Iterations replayed (every one of the record).
  std::uint64_t iterations = 0;
  /// Deltas the iterations had merged.
  std::uint64_t deltas = 0;
  /// Weights hashes that matched the record (one per iteration, i.e. per
  /// published version, plus the initial weights).
  std::uint64_t hashes_checked = 0;
  /// The record's size in bytes.
  std::uint64_t bytes = 0;
  /// The record had been cut by its size limit.
  bool cut = false;
  /// Seconds the replay's iterations took (reading the record excluded).
  double seconds = 0;
  /// Hash of the final weights.
  std::uint64_t final_hash = 0;
};

/// Runs the train stage `train` (made for the recorded run's options, on
/// `net`) through every iteration of `rec` in order, with node services of
/// its own (no cluster), checking the weights hash after each. The first
/// iteration whose weights or train_iter differ from the record is
/// errc::model_mismatch naming it and its published version.
caf::expected<replay_report> replay_learner(const learner_record& rec,
                                            middleware train,
                                            torch::nn::Module& net);

/// Loads the record's initial weights into `net` and checks their hash and
/// the record's algorithm and options against `algo` and `options`
/// (errc::invalid_config names what differs); sets LibTorch's threads to
/// the record's.
caf::error prepare_replay(const learner_record& rec, const std::string& algo,
                          const std::string& options, torch::nn::Module& net);

} // namespace dice::rl
