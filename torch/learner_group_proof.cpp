// Pair membership proof: Gloo's pairs are plain TCP and take whoever
// connects first, so once a group is connected every pair proves over its
// own connection that both ends hold the cluster secret (see prove_pairs).

#include "dice/security/auth.hpp"

#include "learner_group_impl.hpp"
#include <torch/torch.h>

#include <cstring>

namespace dice::detail {

namespace {

// Gloo tag of the proofs (no other send/recv of the group uses tags).
constexpr int proof_tag = 0x6c67; // "lg"

constexpr std::size_t nonce_bytes = 32;
constexpr std::size_t mac_bytes = 32;

std::string big_endian(std::uint64_t x, int bytes) {
  std::string result(static_cast<std::size_t>(bytes), '\0');
  for (int i = bytes - 1; i >= 0; --i, x >>= 8)
    result[static_cast<std::size_t>(i)] = static_cast<char>(x & 0xFF);
  return result;
}

at::Tensor bytes_tensor(const std::string& xs) {
  auto t = torch::empty({static_cast<std::int64_t>(xs.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), xs.data(), xs.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  return {static_cast<const char*>(t.data_ptr()),
          static_cast<std::size_t>(t.numel())};
}

} // namespace

caf::error prove_pairs(c10d::ProcessGroupGloo& pg,
                       const learner_group_config& cfg,
                       const std::string& where) {
  auto n = static_cast<std::size_t>(cfg.size);
  // Fresh nonces from every rank: a proof from an earlier group (or an
  // earlier generation) cannot be replayed into this one.
  std::vector<at::Tensor> mine{bytes_tensor(random_nonce(nonce_bytes))};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (std::size_t r = 0; r < n; ++r)
    gathered[0].push_back(
      torch::empty({static_cast<std::int64_t>(nonce_bytes)}, torch::kUInt8));
  pg.allgather(gathered, mine)->wait();
  std::string nonces;
  for (auto& t : gathered[0])
    nonces += tensor_bytes(t);
  auto proof = [&](int from, int to) {
    return hmac_sha256(cfg.secret,
                       {"dice-lg pair", big_endian(cfg.generation, 8),
                        big_endian(static_cast<std::uint32_t>(from), 4),
                        big_endian(static_cast<std::uint32_t>(to), 4), nonces});
  };
  // Over the pair itself: the proof says that the other end of *this*
  // connection holds the secret, not just someone at the store.
  std::vector<std::vector<at::Tensor>> sent(n);
  std::vector<std::vector<at::Tensor>> received(n);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (int p = 0; p < cfg.size; ++p) {
    if (p == cfg.rank)
      continue;
    auto i = static_cast<std::size_t>(p);
    sent[i] = {bytes_tensor(proof(cfg.rank, p))};
    received[i] = {
      torch::zeros({static_cast<std::int64_t>(mac_bytes)}, torch::kUInt8)};
    works.push_back(pg.send(sent[i], p, proof_tag));
    works.push_back(pg.recv(received[i], p, proof_tag));
  }
  for (auto& w : works)
    w->wait();
  // The lowest peer whose proof failed here (-1: all verified).
  std::int64_t refused = -1;
  for (int p = 0; p < cfg.size && refused < 0; ++p)
    if (p != cfg.rank
        && !same_mac(tensor_bytes(received[static_cast<std::size_t>(p)][0]),
                     proof(p, cfg.rank)))
      refused = p;
  // Everyone learns every verdict, so that all ranks fail together instead
  // of the verified ones waiting for a group that will never work.
  std::vector<at::Tensor> verdict{torch::full({1}, refused, torch::kInt64)};
  std::vector<std::vector<at::Tensor>> verdicts(1);
  for (std::size_t r = 0; r < n; ++r)
    verdicts[0].push_back(torch::empty({1}, torch::kInt64));
  pg.allgather(verdicts, verdict)->wait();
  std::string failed;
  for (std::size_t r = 0; r < n; ++r) {
    auto v = verdicts[0][r].item<std::int64_t>();
    if (v >= 0)
      failed += std::string{failed.empty() ? "" : ", "} + "rank "
        + std::to_string(r) + " refused rank " + std::to_string(v);
  }
  if (failed.empty())
    return caf::none;
  return make_error(errc::handshake_failed,
                    where + ": pair membership proof failed (" + failed
                      + "): a learner without the cluster secret is on a "
                        "pair; the group is torn down");
}

} // namespace dice::detail
