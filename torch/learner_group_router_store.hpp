#pragma once

// Internal: the rendezvous store a learner group of dice forms through,
// carried as text over dice's router (authenticated, cluster secret / TLS)
// instead of a c10d TCPStore, so that no store port listens anywhere.
// Rank 0 of a generation holds the key/value map (the authority); the
// other ranks send it requests on `learner_group_alive_topic` and wait for
// its replies. The forming thread calls set/get/add; the role actor feeds
// in what arrives (`on_text`) and sends out what is queued (`take_outbox`),
// because only the role actor may publish.

#include "dice/torch/learner_group.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dice::detail {

/// Longest key (c10d's and gloo's keys are short paths).
inline constexpr std::size_t max_store_key = 200;

/// Largest value (gloo's per-rank addresses: ~140 bytes per peer).
inline constexpr std::size_t max_store_value = 64 * 1024;

/// Most keys the authority holds, and most gets it keeps waiting.
inline constexpr std::size_t max_store_keys = 4096;

/// Most bytes of values the authority holds (gloo's addresses of a group of
/// L take about L * L * 140 bytes: 16 MiB is L = 340).
inline constexpr std::size_t max_store_bytes = 16 * 1024 * 1024;

/// A request to the authority: "dice-lg1 store GEN FROM ID OP KEY ARG".
struct store_request {
  enum class op_type { set, get, add };
  std::uint64_t generation = 0;
  std::uint32_t from = 0;
  std::uint64_t id = 0;
  op_type op = op_type::get;
  std::string key;
  /// set: the value; unused otherwise.
  std::vector<std::uint8_t> value;
  /// get: wait until the key exists (1) or answer at once (0); add: delta.
  std::int64_t arg = 0;
};

/// The authority's answer: "dice-lg1 stored GEN TO ID KIND [ARG]".
struct store_reply {
  enum class kind_type { ok, value, none, sum, refused };
  std::uint64_t generation = 0;
  std::uint32_t to = 0;
  std::uint64_t id = 0;
  kind_type kind = kind_type::ok;
  std::vector<std::uint8_t> value;
  std::int64_t sum = 0;
};

/// Rank 0's announcement, retained on `learner_group_topic`: generation
/// GEN of SIZE learners forms now through rank 0's router store:
/// "dice-lg1 rendezvous GEN SIZE", followed by " NODE NONCE" when the
/// generation admits a joiner (it takes the last rank).
struct rendezvous_hello {
  std::uint64_t generation = 0;
  std::uint32_t size = 0;
  std::optional<std::uint32_t> joiner;
  std::uint64_t joiner_nonce = 0;
};

/// The wire forms (values in lower-case hex).
std::string to_wire(const store_request& x);
std::string to_wire(const store_reply& x);
std::string to_wire(const rendezvous_hello& x);

/// Strict parsers: nullopt for anything but the exact form within bounds.
std::optional<store_request> parse_store_request(std::string_view str);
std::optional<store_reply> parse_store_reply(std::string_view str);
std::optional<rendezvous_hello> parse_rendezvous_hello(std::string_view str);

/// The rendezvous of one generation, on one learner.
class router_store : public rendezvous_store {
 public:
  /// `authority`: this learner is the generation's rank 0. Requests to the
  /// authority give up after `op_timeout` (a get: its own timeout).
  router_store(std::uint64_t generation, std::uint32_t self, bool authority,
               std::chrono::milliseconds op_timeout);

  caf::error set(const std::string& key,
                 std::vector<std::uint8_t> value) override;

  caf::expected<std::vector<std::uint8_t>>
  get(const std::string& key, std::chrono::milliseconds timeout) override;

  caf::expected<std::int64_t> add(const std::string& key,
                                  std::int64_t delta) override;

  /// What arrived on the topic (role actor). Returns false if `text` is no
  /// store message at all; true if it is one (used or not for this store).
  /// The authority's immediate answers are queued for `take_outbox`.
  bool on_text(std::string_view text);

  /// True if texts wait to be published.
  bool has_outbox() const;

  /// The texts to publish now, in order (role actor).
  std::vector<std::string> take_outbox();

  /// Ends the rendezvous: waiting calls fail at once, later ones too, and
  /// the authority answers nobody any more.
  void close();

  /// Store messages refused so far (malformed, out of bounds, full).
  std::uint64_t refused() const;

 private:
  caf::expected<store_reply> call(store_request req,
                                  std::chrono::milliseconds timeout);
  void serve(const store_request& req);        // authority, under mtx_
  void answer_waiting(const std::string& key); // authority, under mtx_
  // Stores `value` under `key` (authority, under mtx_); false: over bounds.
  bool put(const std::string& key, std::vector<std::uint8_t> value);
  caf::error closed_error() const;

  std::uint64_t generation_;
  std::uint32_t self_;
  bool authority_;
  std::chrono::milliseconds op_timeout_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool closed_ = false;
  std::uint64_t refused_ = 0;
  std::deque<std::string> outbox_;
  // Authority: the map, and gets waiting for a key.
  std::map<std::string, std::vector<std::uint8_t>> kv_;
  std::size_t kv_bytes_ = 0;
  std::vector<store_request> waiting_;
  // Others: requests sent, and their answers once heard.
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, std::optional<store_reply>> calls_;
};

} // namespace dice::detail
