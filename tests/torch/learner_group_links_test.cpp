// The exchange's own links (torch/learner_group_links.cpp): they admit
// nobody the Gloo pairs' proof would refuse, and a peer that leaves or hangs
// mid-step ends the step (at once, or at the timeout). Ranks are threads of
// this process; nothing sleeps.

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"
#include "torch/learner_group_support.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace dice::test::links {

using namespace std::chrono_literals;

// An in-memory rendezvous store that, when rank 0 publishes its link
// listener, first connects a stranger to it: the stranger is then first in
// the listener's queue, ahead of rank 1.
class ambush_store : public memory_store {
 public:
  ~ambush_store() override {
    if (stranger_.joinable())
      stranger_.join();
  }

  caf::error set(const std::string& key,
                 std::vector<std::uint8_t> value) override {
    if (key.size() >= 7 && key.compare(key.size() - 7, 7, "links/0") == 0)
      ambush(std::string(value.begin(), value.end()));
    return memory_store::set(key, std::move(value));
  }

  /// What the stranger saw: the bytes rank 0 answered its hello with, and
  /// whether rank 0 then closed the connection on it.
  /// (Call once.)
  std::future<std::pair<std::size_t, bool>> outcome() {
    return result_.get_future();
  }

 private:
  void ambush(const std::string& address) {
    auto space = address.rfind(' ');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(
      static_cast<std::uint16_t>(std::stoul(address.substr(space + 1))));
    ::inet_pton(AF_INET, address.substr(0, space).c_str(), &sa.sin_addr);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    // Loopback: connected (queued at the listener) when this returns.
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      ::close(fd);
      result_.set_value({0, false});
      return;
    }
    stranger_ = std::thread([this, fd] {
      // A well-formed hello claiming to be rank 1 of generation 0, so that
      // rank 0 gets as far as checking the proof.
      char hello[56] = {'d', 'i', 'c', 'e', '-', 'l', 'g', 'y'};
      std::uint32_t from = 1;
      std::memcpy(hello + 16, &from, sizeof(from));
      ::send(fd, hello, sizeof(hello), MSG_NOSIGNAL);
      std::size_t answered = 0;
      char buf[256];
      bool closed = false;
      for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 20000) <= 0)
          break; // rank 0 neither answered nor closed
        auto k = ::recv(fd, buf, sizeof(buf), 0);
        if (k <= 0) {
          closed = true;
          break;
        }
        answered += static_cast<std::size_t>(k);
        if (answered >= 64) {
          // Its nonce and proof came; ours is a guess.
          char guess[32] = {};
          ::send(fd, guess, sizeof(guess), MSG_NOSIGNAL);
        }
      }
      ::close(fd);
      result_.set_value({answered, closed});
    });
  }

  std::promise<std::pair<std::size_t, bool>> result_;
  std::thread stranger_;
};

TEST(LearnerGroupLinks, StrangerAtTheLinkListenerIsRefusedAndTheGroupForms) {
  auto store = std::make_shared<ambush_store>();
  auto outcome = store->outcome();
  std::vector<std::string> bytes(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto c = test_config(r, 2, 0, reduce_mode::exchange);
      c.store = store;
      c.secret = std::string(32, 's');
      auto g = learner_group::form(c);
      ASSERT_TRUE(g) << render(g.error());
      auto net = make_net(30 + r);
      torch::optim::SGD opt{net->parameters(), 0.1};
      ASSERT_FALSE(g->broadcast_parameters(*net));
      for (int s = 1; s <= 3; ++s)
        ASSERT_FALSE(train_step(*g, net, opt, r, s));
      bytes[static_cast<std::size_t>(r)] = module_bytes(*net);
    });
  for (auto& t : threads)
    t.join();
  ASSERT_EQ(outcome.wait_for(30s), std::future_status::ready);
  auto [answered, closed] = outcome.get();
  // Rank 0 answered with its nonce and proof (64 bytes), then closed the
  // connection on the wrong proof and linked with the real rank 1.
  EXPECT_EQ(answered, 64u);
  EXPECT_TRUE(closed);
  ASSERT_FALSE(bytes[0].empty());
  EXPECT_TRUE(bytes[0] == bytes[1]);
}

TEST(LearnerGroupLinks, PeerLeavingMidStepEndsTheStepAtOnce) {
  // Over the sockets: shared memory off (LearnerGroupShm has it on).
  auto base = test_config(0, 2, 0, reduce_mode::exchange);
  base.shared_memory = false;
  auto x = leave_mid_step(base, 40);
  EXPECT_TRUE(is_failure(x.err)) << render(x.err);
  // At once: well within the step timeout (10 s).
  EXPECT_LT(x.fail_ms, 5000.0) << render(x.err);
  // The group is broken now: later calls fail without blocking.
  EXPECT_TRUE(x.later_failed);
}

TEST(LearnerGroupLinks, HungPeerEndsTheStepAtTheTimeout) {
  auto base = test_config(0, 2, 0, reduce_mode::exchange);
  base.timeout = 1000ms;
  base.shared_memory = false;
  auto x = hang_mid_step(base, 50);
  EXPECT_TRUE(is(x.err, errc::timeout)) << render(x.err);
  EXPECT_GE(x.fail_ms, 900.0);
  EXPECT_LT(x.fail_ms, 1000.0 + 4000.0);
}

} // namespace dice::test::links
