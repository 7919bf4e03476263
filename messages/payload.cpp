#include "dice/messages/payload.hpp"

#include "dice/messages/context_delta.hpp"

namespace dice {

bool operator==(const payload& x, const payload& y) {
  return x.count == y.count && x.origin == y.origin
    && x.model_version == y.model_version && x.bytes == y.bytes;
}

std::uint64_t item_count(const std::vector<payload>& xs) {
  std::uint64_t n = 0;
  for (auto& x : xs)
    n += x.count;
  return n;
}

bool operator==(const context_delta& x, const context_delta& y) {
  return x.sender == y.sender && x.incarnation == y.incarnation
    && x.seq == y.seq && x.base == y.base && x.sender_roles == y.sender_roles
    && x.env_step == y.env_step && x.env_episode == y.env_episode
    && x.train_iter == y.train_iter && x.trajectories == y.trajectories
    && x.episodes == y.episodes && x.trajectory_end_idx == y.trajectory_end_idx
    && x.has_trajectory_end_idx == y.has_trajectory_end_idx
    && x.model_version == y.model_version;
}

bool empty(const context_delta& x) {
  return !x.env_step && !x.env_episode && !x.train_iter
    && x.trajectories.empty() && x.episodes.empty()
    && !x.has_trajectory_end_idx;
}

std::size_t payload_bytes(const context_delta& x) {
  std::size_t n = 0;
  for (auto& p : x.trajectories)
    n += p.bytes.size();
  for (auto& p : x.episodes)
    n += p.bytes.size();
  return n;
}

const char* sequence_error(const context_delta& x) {
  if (x.seq > max_delta_seq)
    return "seq beyond the limit";
  if (x.seq == 0)
    return x.base == 0 ? nullptr : "a base without a seq";
  // base 0: the sender says nothing about older seqs (receivers start the
  // stream at seq itself, the rule before protocol v3).
  if (x.base > x.seq)
    return "base beyond seq";
  return nullptr;
}

} // namespace dice
