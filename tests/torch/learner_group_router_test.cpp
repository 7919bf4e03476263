// The rendezvous dice's learner groups form through (issue 24): a store
// carried as text messages, rank 0 holding the map, and the pair membership
// proof with the cluster secret. Ranks are threads; a test "router" moves
// the texts between the ranks' stores the way the role actors do.

#include "torch/learner_group_router_store.hpp"

#include "learner_group_sockets.hpp"
#include "learner_group_support.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace {

using namespace std::chrono_literals;
using dice::errc;
using dice::learner_group;
using dice::learner_group_config;
using dice::detail::router_store;
using namespace dice::test;

using dice::test::secret_1;

/// Moves every store's outgoing texts to all the other stores (a broadcast
/// topic), until destroyed.
class test_router {
 public:
  explicit test_router(std::vector<std::shared_ptr<router_store>> stores)
    : stores_(std::move(stores)), thread_([this] {
        run();
      }) {}

  ~test_router() {
    stop_ = true;
    thread_.join();
  }

  std::uint64_t delivered() const {
    return delivered_;
  }

 private:
  void run() {
    while (!stop_) {
      bool moved = false;
      for (auto& from : stores_)
        for (auto& text : from->take_outbox()) {
          moved = true;
          ++delivered_;
          for (auto& to : stores_)
            if (to != from) {
              EXPECT_TRUE(to->on_text(text)) << text;
            }
        }
      if (!moved)
        std::this_thread::yield();
    }
  }

  std::vector<std::shared_ptr<router_store>> stores_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> delivered_{0};
  std::thread thread_;
};

std::vector<std::shared_ptr<router_store>> make_stores(int n,
                                                       std::uint64_t gen = 0) {
  std::vector<std::shared_ptr<router_store>> result;
  for (int r = 0; r < n; ++r)
    result.push_back(std::make_shared<router_store>(
      gen, static_cast<std::uint32_t>(10 + r), r == 0, 10s));
  return result;
}

learner_group_config config(int rank, int size,
                            std::shared_ptr<dice::rendezvous_store> store) {
  auto c = test_config(rank, size, 0);
  c.store = std::move(store);
  c.join_timeout = 10s;
  c.timeout = 5s;
  return c;
}

TEST(LearnerGroupRouterStore, ParsersRefuseAllButTheExactForm) {
  using dice::detail::parse_rendezvous_hello;
  using dice::detail::parse_store_reply;
  using dice::detail::parse_store_request;
  dice::detail::store_request req;
  req.generation = 3;
  req.from = 7;
  req.id = 9;
  req.op = dice::detail::store_request::op_type::set;
  req.key = "dice/learners/g3//0/1";
  req.value = {0x00, 0xAB, 0xFF};
  auto wire = dice::detail::to_wire(req);
  EXPECT_EQ(wire, "dice-lg1 store 3 7 9 set dice/learners/g3//0/1 00abff");
  auto back = parse_store_request(wire);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->value, req.value);
  EXPECT_EQ(back->key, req.key);
  EXPECT_TRUE(parse_store_request("dice-lg1 store 3 7 9 get k 1"));
  req.value.clear();
  wire = dice::detail::to_wire(req);
  EXPECT_EQ(wire, "dice-lg1 store 3 7 9 set dice/learners/g3//0/1 -");
  ASSERT_TRUE(parse_store_request(wire));
  EXPECT_TRUE(parse_store_request(wire)->value.empty());
  EXPECT_TRUE(parse_store_request("dice-lg1 store 3 7 9 add k -1"));
  EXPECT_TRUE(parse_store_reply("dice-lg1 stored 3 7 9 value 00ff"));
  EXPECT_TRUE(parse_store_reply("dice-lg1 stored 3 7 9 sum 2"));
  EXPECT_TRUE(parse_rendezvous_hello("dice-lg1 rendezvous 2 3"));
  EXPECT_TRUE(parse_rendezvous_hello("dice-lg1 rendezvous 2 3 5 77"));
  std::string big(2 * dice::detail::max_store_value + 2, 'a');
  for (auto bad : std::vector<std::string>{
         "",
         "dice-lg1 store 3 7 9 set k 0", // odd hex
         "dice-lg1 store 3 7 9 set k ",
         "dice-lg1 store 3 7 9 set k --",
         "dice-lg1 store 3 7 9 set k 0G",
         "dice-lg1 store 3 7 9 set k 00AB",
         "dice-lg1 store 3 7 9 set k\tx 00",
         "dice-lg1 store 3 7 9 get k 2",
         "dice-lg1 store 3 7 9 get k 1 ",
         "dice-lg1  store 3 7 9 get k 1",
         "dice-lg1 store -3 7 9 get k 1",
         "dice-lg1 store 3 7 9 del k 1",
         "dice-lg1 store 3 7 9 add k 1x",
         "dice-lg1 store 3 7 9 set k " + big,
         "dice-lg1 store 3 7 9 get " + std::string(201, 'k') + " 1",
         "dice-lg2 store 3 7 9 get k 1",
         "dice-lg1 stored 3 7 9 ok 1",
         "dice-lg1 stored 3 7 9 maybe",
         "dice-lg1 rendezvous 2 0",
         "dice-lg1 rendezvous 2 1 5 77",
         "dice-lg1 rendezvous 2 3 5",
         "dice-lg1 hello 0 2 127.0.0.1 4000"}) {
    EXPECT_FALSE(parse_store_request(bad)) << bad;
    EXPECT_FALSE(parse_store_reply(bad)) << bad;
    EXPECT_FALSE(parse_rendezvous_hello(bad)) << bad;
  }
  // Stale or foreign texts are store texts, but change nothing.
  auto stores = make_stores(2, 4);
  EXPECT_TRUE(stores[0]->on_text("dice-lg1 store 3 11 1 set k 00"));
  EXPECT_FALSE(stores[0]->has_outbox());
  EXPECT_FALSE(stores[0]->on_text("dice-lg1 alive 4 1"));
  // Rank 0 holds at most max_store_bytes: beyond, a set is refused.
  std::string value(2 * dice::detail::max_store_value, 'a');
  auto limit = dice::detail::max_store_bytes / dice::detail::max_store_value;
  for (std::size_t k = 0; k <= limit; ++k)
    ASSERT_TRUE(stores[0]->on_text("dice-lg1 store 4 11 " + std::to_string(k)
                                   + " set k" + std::to_string(k) + " "
                                   + value));
  auto answers = stores[0]->take_outbox();
  ASSERT_EQ(answers.size(), limit + 1);
  EXPECT_EQ(answers[limit - 1],
            "dice-lg1 stored 4 11 " + std::to_string(limit - 1) + " ok");
  EXPECT_EQ(answers[limit],
            "dice-lg1 stored 4 11 " + std::to_string(limit) + " refused");
  EXPECT_EQ(stores[0]->refused(), 1u);
}

// L = 3 forms through rank 0's store over the (test) router, every pair
// proves membership, and the group trains with identical parameters; no
// TCPStore: no store port.
TEST(LearnerGroupRouterStore, GroupFormsThroughTheRouterStoreAndPairsProve) {
  auto stores = make_stores(3);
  test_router bus{stores};
  auto bytes = dice::test::train_three_without_a_store_port([&](int r) {
    auto c = config(r, 3, stores[static_cast<std::size_t>(r)]);
    c.secret = secret_1;
    return c;
  });
  ASSERT_FALSE(bytes[0].empty());
  EXPECT_TRUE(bytes[1] == bytes[0] && bytes[2] == bytes[0]);
  EXPECT_GT(bus.delivered(), 0u);
}

// A rank whose secret differs stands for a process that got onto a pair
// without the secret: forming fails with handshake_failed on every rank,
// naming the rank, and no gradient is reduced.
TEST(LearnerGroupProof, RankWithoutTheSecretFailsFormingOnEveryRank) {
  auto stores = make_stores(3);
  test_router bus{stores};
  std::vector<caf::error> errors(3);
  std::vector<bool> grads_kept(3, false);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto c = config(r, 3, stores[static_cast<std::size_t>(r)]);
      c.secret = r == 2 ? std::string(32, 'x') : secret_1;
      auto g = learner_group::create(c);
      ASSERT_TRUE(g) << dice::render(g.error());
      errors[static_cast<std::size_t>(r)] = g->join();
      // No gradient goes through a group that failed its proof.
      auto net = make_net(20 + r);
      auto x = torch::randn({4, 16});
      torch::mse_loss(net->forward(x), torch::zeros({4, 4})).backward();
      auto before = net->fc1->weight.grad().clone();
      EXPECT_TRUE(g->all_reduce_gradients(*net));
      grads_kept[static_cast<std::size_t>(r)] = torch::equal(
        before, net->fc1->weight.grad());
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < 3; ++r) {
    auto& err = errors[static_cast<std::size_t>(r)];
    ASSERT_TRUE(err) << "rank " << r << " formed a group with a stranger";
    EXPECT_TRUE(dice::is(err, errc::handshake_failed)) << dice::render(err);
    EXPECT_NE(dice::render(err).find("refused rank 2"), std::string::npos)
      << dice::render(err);
    EXPECT_TRUE(grads_kept[static_cast<std::size_t>(r)]) << "rank " << r;
    std::cout << "rank " << r << ": " << dice::render(err) << std::endl;
  }
}

// Holds a rank's first write after all ranks arrived (its Gloo addresses):
// the other ranks then sit in Gloo's connect, their pair listeners open.
class stalling_store : public dice::rendezvous_store {
 public:
  explicit stalling_store(std::shared_ptr<router_store> inner)
    : inner_(std::move(inner)) {}

  caf::error set(const std::string& key,
                 std::vector<std::uint8_t> value) override {
    if (key.find("all_arrived") == std::string::npos) {
      std::unique_lock<std::mutex> guard{mtx_};
      cv_.wait(guard, [this] {
        return released_;
      });
      return dice::make_error(errc::unreachable, "stalled rank gives up");
    }
    return inner_->set(key, std::move(value));
  }

  caf::expected<std::vector<std::uint8_t>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(key, timeout);
  }

  caf::expected<std::int64_t> add(const std::string& key,
                                  std::int64_t delta) override {
    return inner_->add(key, delta);
  }

  void release() {
    std::lock_guard<std::mutex> guard{mtx_};
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::shared_ptr<router_store> inner_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool released_ = false;
};

// While the group forms, this process listens only where Gloo's pairs bind:
// the cluster address (127.0.0.2 here, to tell it from other loopback
// sockets), never a wildcard, and no store port at all.
TEST(LearnerGroupRouterStore, FormingListensOnlyOnTheClusterAddress) {
  auto stores = make_stores(3);
  test_router bus{stores};
  auto stalled = std::make_shared<stalling_store>(stores[2]);
  std::vector<caf::error> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::shared_ptr<dice::rendezvous_store>
        s = stores[static_cast<std::size_t>(r)];
      if (r == 2)
        s = stalled;
      auto c = config(r, 3, s);
      c.address = "127.0.0.2";
      auto g = learner_group::create(c);
      ASSERT_TRUE(g) << dice::render(g.error());
      errors[static_cast<std::size_t>(r)] = g->join();
    });
  // Ranks 0 and 1 wait for rank 2's addresses: their listeners stay open.
  std::vector<listener> seen;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (seen.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    seen = listeners_of("self");
    if (seen.size() < 2)
      std::this_thread::yield();
  }
  for (auto& x : seen)
    std::cout << "listening: " << x.text() << std::endl;
  ASSERT_GE(seen.size(), 2u) << "the forming ranks opened no listeners";
  for (auto& x : seen) {
    EXPECT_FALSE(x.wildcard()) << x.text();
    EXPECT_EQ(x.address, "127.0.0.2") << x.text();
  }
  stalled->release();
  for (auto& s : stores)
    s->close();
  for (auto& t : threads)
    t.join();
  for (auto& err : errors)
    EXPECT_TRUE(err);
}

} // namespace
