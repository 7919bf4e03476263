// The rendezvous store carried over dice's router (see the header).

#include "learner_group_router_store.hpp"

#include "dice/core/errc.hpp"
#include "dice/messages/detail/learner_group_hello.hpp"

#include <algorithm>

namespace dice::detail {

namespace {

std::string_view as_view(const std::vector<std::uint8_t>& xs) {
  return {reinterpret_cast<const char*>(xs.data()), xs.size()};
}

// c10d's TCPStore keeps counters as decimal text; so does this store.
std::vector<std::uint8_t> decimal(std::int64_t x) {
  auto s = std::to_string(x);
  return {s.begin(), s.end()};
}

} // namespace

router_store::router_store(std::uint64_t generation, std::uint32_t self,
                           bool authority, std::chrono::milliseconds op_timeout)
  : generation_(generation), self_(self), authority_(authority),
    op_timeout_(op_timeout) {}

caf::error router_store::closed_error() const {
  return make_error(errc::finished,
                    "learner group rendezvous (generation "
                      + std::to_string(generation_) + "): closed");
}

caf::error router_store::set(const std::string& key,
                             std::vector<std::uint8_t> value) {
  store_request req;
  req.op = store_request::op_type::set;
  req.key = key;
  req.value = std::move(value);
  auto x = call(std::move(req), op_timeout_);
  return x ? caf::error{} : x.error();
}

caf::expected<std::vector<std::uint8_t>>
router_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  store_request req;
  req.op = store_request::op_type::get;
  req.key = key;
  req.arg = timeout.count() > 0 ? 1 : 0;
  // A look without waiting still needs the round trip to the authority.
  auto wait = req.arg ? timeout : op_timeout_;
  auto x = call(std::move(req), wait);
  if (!x)
    return x.error();
  if (x->kind != store_reply::kind_type::value)
    return make_error(errc::timeout, "learner group rendezvous: no key " + key);
  return std::move(x->value);
}

caf::expected<std::int64_t> router_store::add(const std::string& key,
                                              std::int64_t delta) {
  store_request req;
  req.op = store_request::op_type::add;
  req.key = key;
  req.arg = delta;
  auto x = call(std::move(req), op_timeout_);
  if (!x)
    return x.error();
  return x->sum;
}

caf::expected<store_reply>
router_store::call(store_request req, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> guard{mtx_};
  if (closed_)
    return closed_error();
  req.generation = generation_;
  req.from = self_;
  if (authority_) {
    // Rank 0's own calls go to the map directly; a get waits for the key.
    if (req.op == store_request::op_type::get && req.arg) {
      if (!cv_.wait_until(guard, deadline, [&] {
            return closed_ || kv_.count(req.key) > 0;
          }))
        return make_error(errc::timeout,
                          "learner group rendezvous: no key " + req.key
                            + " within the timeout");
      if (closed_)
        return closed_error();
    }
    store_reply r;
    auto i = kv_.find(req.key);
    switch (req.op) {
      case store_request::op_type::get:
        r.kind = i == kv_.end() ? store_reply::kind_type::none
                                : store_reply::kind_type::value;
        if (i != kv_.end())
          r.value = i->second;
        return r;
      case store_request::op_type::add: {
        std::int64_t sum = 0;
        if (i != kv_.end())
          parse_word(as_view(i->second), sum);
        sum += req.arg;
        if (!put(req.key, decimal(sum)))
          return make_error(errc::handshake_failed,
                            "learner group rendezvous: the store is full");
        r.kind = store_reply::kind_type::sum;
        r.sum = sum;
        break;
      }
      default:
        if (!put(req.key, std::move(req.value)))
          return make_error(errc::handshake_failed,
                            "learner group rendezvous: the store is full");
    }
    answer_waiting(req.key);
    cv_.notify_all();
    return r;
  }
  req.id = next_id_++;
  calls_.emplace(req.id, std::nullopt);
  outbox_.push_back(to_wire(req));
  auto id = req.id;
  bool answered = cv_.wait_until(guard, deadline, [&] {
    return closed_ || calls_[id].has_value();
  });
  auto reply = std::move(calls_[id]);
  calls_.erase(id);
  if (closed_)
    return closed_error();
  if (!answered || !reply)
    return make_error(errc::timeout,
                      "learner group rendezvous: rank 0 did not answer "
                        + req.key + " within the timeout");
  if (reply->kind == store_reply::kind_type::refused)
    return make_error(errc::handshake_failed,
                      "learner group rendezvous: rank 0 refused " + req.key);
  return std::move(*reply);
}

void router_store::answer_waiting(const std::string& key) {
  auto i = kv_.find(key);
  if (i == kv_.end())
    return;
  auto last = std::remove_if(
    waiting_.begin(), waiting_.end(), [&](const store_request& w) {
      if (w.key != key)
        return false;
      store_reply r{generation_, w.from, w.id, store_reply::kind_type::value,
                    i->second,   0};
      outbox_.push_back(to_wire(r));
      return true;
    });
  waiting_.erase(last, waiting_.end());
}

bool router_store::put(const std::string& key,
                       std::vector<std::uint8_t> value) {
  auto i = kv_.find(key);
  auto old = i != kv_.end() ? i->second.size() : 0;
  if ((i == kv_.end() && kv_.size() >= max_store_keys)
      || kv_bytes_ - old + value.size() > max_store_bytes)
    return false;
  kv_bytes_ = kv_bytes_ - old + value.size();
  kv_[key] = std::move(value);
  return true;
}

void router_store::serve(const store_request& req) {
  store_reply r{generation_, req.from, req.id, store_reply::kind_type::ok,
                {},          0};
  auto i = kv_.find(req.key);
  switch (req.op) {
    case store_request::op_type::get:
      if (i != kv_.end()) {
        r.kind = store_reply::kind_type::value;
        r.value = i->second;
      } else if (!req.arg) {
        r.kind = store_reply::kind_type::none;
      } else if (waiting_.size() < max_store_keys) {
        waiting_.push_back(req); // answered when the key is set
        return;
      } else {
        ++refused_;
        r.kind = store_reply::kind_type::refused;
      }
      break;
    case store_request::op_type::add: {
      std::int64_t sum = 0;
      if (i != kv_.end())
        parse_word(as_view(i->second), sum);
      // Bounded: the group's counters count ranks, never near overflow.
      if (req.arg < -65536 || req.arg > 65536
          || !put(req.key, decimal(sum + req.arg))) {
        ++refused_;
        r.kind = store_reply::kind_type::refused;
        break;
      }
      sum += req.arg;
      r.kind = store_reply::kind_type::sum;
      r.sum = sum;
      answer_waiting(req.key);
      break;
    }
    default:
      if (!put(req.key, req.value)) {
        ++refused_;
        r.kind = store_reply::kind_type::refused;
        break;
      }
      answer_waiting(req.key);
  }
  outbox_.push_back(to_wire(r));
  cv_.notify_all();
}

bool router_store::on_text(std::string_view text) {
  if (auto req = parse_store_request(text)) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (authority_ && !closed_ && req->generation == generation_
        && req->from != self_)
      serve(*req);
    return true;
  }
  if (auto rep = parse_store_reply(text)) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (authority_ || closed_ || rep->generation != generation_
        || rep->to != self_)
      return true;
    auto i = calls_.find(rep->id);
    if (i != calls_.end() && !i->second) {
      i->second = std::move(*rep);
      cv_.notify_all();
    }
    return true;
  }
  return false;
}

bool router_store::has_outbox() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return !outbox_.empty();
}

std::vector<std::string> router_store::take_outbox() {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<std::string> result{std::make_move_iterator(outbox_.begin()),
                                  std::make_move_iterator(outbox_.end())};
  outbox_.clear();
  return result;
}

void router_store::close() {
  std::lock_guard<std::mutex> guard{mtx_};
  closed_ = true;
  kv_.clear();
  kv_bytes_ = 0;
  waiting_.clear();
  outbox_.clear();
  cv_.notify_all();
}

std::uint64_t router_store::refused() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return refused_;
}

} // namespace dice::detail
