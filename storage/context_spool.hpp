#pragma once

// A collector's durable spool of unacknowledged context deltas: each delta
// is appended to a file before it goes to the router, and forgotten once the
// learner acknowledged it. A collector killed with kill -9 loses its memory
// but not the file (write(2) puts the bytes in the kernel's page cache, which
// outlives the process); its next incarnation republishes what the learner
// had not acknowledged, under the old incarnation's incarnation and seqs, so
// the learner's per-(sender, incarnation) dedup applies each delta exactly
// once. Power loss is another matter: without `fsync` the last writes may be
// lost with the page cache (docs/distributed.md, "Supervision").

#include "dice/messages/context_delta.hpp"
#include "dice/process/unique_fd.hpp"

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dice {

/// Where and how a context spool writes.
struct context_spool_options {
  /// Directory of the spool files (created, mode 0700, if missing). Files
  /// are named "dice-spool.<node>.<incarnation>.<segment>": nodes may share it.
  std::string dir;
  /// This node's id: only its own earlier incarnations are taken over.
  std::uint32_t node = 0;
  /// This incarnation's incarnation.
  std::uint64_t incarnation = 0;
  /// Authenticates headers and records (HMAC-SHA256 under this key, from
  /// the cluster secret: security/auth.hpp's spool_key) instead of only
  /// checksumming them, so a spool file someone without the secret wrote or
  /// changed is refused with its file and offset. Empty: a checksum only.
  std::string key;
  /// fdatasync after every write: survives power loss too, at the cost of
  /// a disk flush per delta (process death needs no sync).
  bool fsync = false;
  /// A segment past this size is replaced by a new one holding only the
  /// unsettled deltas (keeps the spool bounded by the window).
  std::size_t segment_bytes = std::size_t{4} << 20;
};

/// The unsettled deltas of one earlier incarnation, found when a spool
/// opened.
struct spooled_incarnation {
  /// Its incarnation.
  std::uint64_t incarnation = 0;
  /// Its deltas past the last settled seq, by seq.
  std::vector<context_delta> deltas;
};

/// Append-only spool files of one collector incarnation, plus the files of
/// earlier incarnations of the same node that it took over. Single-threaded
/// (the role actor's). Every file starts with a header (magic, node,
/// incarnation); every record is kind | length | XXH3 checksum | payload, the
/// payload a context_delta in CAF's binary encoding or a settled seq. A record
/// cut short by a kill, or corrupt, ends what is read from its file.
class context_spool {
 public:
  /// Opens the spool: creates the directory, takes over (locks) the files
  /// of earlier incarnations of `opts.node` that no live process holds,
  /// and reads their unsettled deltas (`recovered()`). Files that are not
  /// this node's or cannot be read are logged and left alone (`refused()`).
  /// An error only when the directory cannot be used at all.
  static caf::expected<std::unique_ptr<context_spool>>
  open(context_spool_options opts);

  /// Creates `dir` (0700) if missing, else refuses it unless this user owns
  /// it and neither group nor others can write it: where another user can
  /// create files, a forged spool file can be planted for a node to
  /// republish as its own. A node checks its spool directory at its start.
  static caf::error prepare_dir(const std::string& dir);

  /// Closes (and unlocks) every file; removes nothing.
  ~context_spool();

  context_spool(const context_spool&) = delete;
  context_spool& operator=(const context_spool&) = delete;

  /// Unsettled deltas of earlier incarnations found by `open` (by incarnation);
  /// hands them over once (later calls return nothing).
  std::vector<spooled_incarnation> take_recovered();

  /// What `open` left alone and why, one line per file.
  const std::vector<std::string>& refused() const noexcept {
    return refused_;
  }

  /// Appends `d` (this incarnation's) before it is published.
  caf::error append(const context_delta& d);

  /// Every seq of `incarnation` up to `upto` is settled (acknowledged or given
  /// up). For this incarnation it is recorded, and a segment past its size
  /// is replaced; for an earlier one whose deltas are now all settled its
  /// files are removed.
  caf::error settle(std::uint64_t incarnation, std::uint64_t upto);

  /// Removes every file this spool holds (the run is over).
  void remove_all();

  /// Files this spool holds (its own and those taken over).
  std::size_t files() const;

  /// Bytes in this incarnation's current segment (0: none yet).
  std::size_t segment_size() const noexcept {
    return own_.segments.empty() ? 0 : own_.segments.back().size;
  }

 private:
  struct record_pos {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
  };

  struct segment {
    std::string path;
    unique_fd fd; // open and locked (flock) while the segment is ours
    std::uint64_t size = 0;
  };

  struct own_state {
    std::vector<segment> segments; // the last one is written
    std::uint64_t next_segment = 0;
    std::uint64_t settled = 0;
    std::map<std::uint64_t, record_pos> unsettled; // in the last segment
  };

  struct old_state {
    std::vector<segment> segments;
    std::uint64_t last_seq = 0;
    std::uint64_t settled = 0;
  };

  explicit context_spool(context_spool_options opts);

  caf::error scan();
  caf::error new_segment();
  caf::error write_record(segment& s, std::uint32_t kind,
                          const std::vector<char>& payload, record_pos* where);
  caf::error rotate();

  context_spool_options opts_;
  own_state own_;
  std::map<std::uint64_t, old_state> old_;
  std::vector<spooled_incarnation> recovered_;
  std::vector<std::string> refused_;
};

} // namespace dice
