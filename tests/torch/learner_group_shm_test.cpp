// The exchange's same-host shortcut (torch/learner_group_shm.cpp): ranks on
// one host pass small gradients through shared memory with the same sums
// as the socket, large ones still take the socket, a peer's departure ends
// a step at once, and an offer that does not name the peer's own sealed
// segment maps nothing. Ranks are threads of this process; nothing sleeps.

#include "dice/core/errc.hpp"
#include "dice/security/auth.hpp"
#include "dice/torch/learner_group.hpp"
#include "torch/learner_group_shm.hpp"
#include "torch/learner_group_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>

namespace dice::test::shm {

using namespace std::chrono_literals;
using detail::shm_link;
using detail::shm_messages;
using detail::shm_offer;

// One step with gradients drawn for this rank and step instead of computed:
// this file compares two runs to the bit, and LibTorch's forward and
// backward are not bit-reproducible when ranks run them on threads at once
// over a BLAS that is not thread-safe (Debian's libopenblas0-serial:
// 2 of 60 runs computed other gradients; none with the reference libblas3
// that scripts/install-deps installs). What is compared is the exchange.
caf::error drawn_step(learner_group& g, tiny_net& net,
                      torch::optim::Optimizer& opt, int rank, int step) {
  auto gen = step_generator(rank, step);
  for (auto& p : net->parameters())
    p.mutable_grad() = torch::randn(p.sizes(), gen);
  if (auto err = g.all_reduce_gradients(*net))
    return err;
  opt.step();
  return caf::none;
}

// Every rank's parameters after `steps` steps of drawn_step, 3 ranks;
// `off_rank` (if >= 0) alone has the shortcut off.
std::vector<std::string> train(bool shared_memory, int steps,
                               int off_rank = -1) {
  auto base = test_config(0, 3, 0, reduce_mode::exchange);
  base.shared_memory = shared_memory;
  std::vector<std::string> bytes(3);
  auto tweak = [off_rank](int r, learner_group_config& c) {
    if (r == off_rank)
      c.shared_memory = false;
  };
  with_group(
    base,
    [&](int r, learner_group& g) {
      // Seeding and drawing from torch's global generator, one rank at a
      // time: rank 0's start is the same in both runs.
      static std::mutex seeding;
      std::unique_lock<std::mutex> one{seeding};
      auto net = make_net(60 + r);
      one.unlock();
      torch::optim::SGD opt{net->parameters(), 0.1};
      ASSERT_FALSE(g.broadcast_parameters(*net)); // rank 0's start everywhere
      for (int s = 1; s <= steps; ++s)
        ASSERT_FALSE(drawn_step(g, net, opt, r, s));
      bytes[static_cast<std::size_t>(r)] = module_bytes(*net);
    },
    tweak);
  return bytes;
}

TEST(LearnerGroupShm, RanksOnOneHostExchangeThroughSharedMemory) {
  auto before = shm_messages();
  auto on = train(true, 5);
  auto during = shm_messages();
  auto off = train(false, 5);
  // 3 ranks, 2 peers each, 5 steps.
  EXPECT_EQ(during - before, 30u);
  EXPECT_EQ(shm_messages(), during) << "shared memory used while off";
  ASSERT_FALSE(on[0].empty());
  EXPECT_TRUE(on[0] == on[1] && on[1] == on[2]);
  EXPECT_TRUE(off[0] == off[1] && off[1] == off[2]);
  // The same sums in the same order as over the sockets, to the bit.
  EXPECT_TRUE(on[0] == off[0]);
}

// One rank with the shortcut off: its pairs keep the socket (both sides
// must map), the pair of the other two still uses shared memory, nobody
// waits for an offer that never comes, and the sums are the same.
TEST(LearnerGroupShm, ARankWithTheShortcutOffKeepsTheSocketForItsPairs) {
  auto before = shm_messages();
  auto mixed = train(true, 5, 1);
  auto during = shm_messages();
  auto off = train(false, 5);
  // Ranks 0 and 2, one message each way a step, 5 steps.
  EXPECT_EQ(during - before, 10u);
  ASSERT_FALSE(mixed[0].empty());
  EXPECT_TRUE(mixed[0] == mixed[1] && mixed[1] == mixed[2]);
  EXPECT_TRUE(mixed[0] == off[0]);
}

TEST(LearnerGroupShm, LargeMessagesTakeTheSocketBesideSmallOnes) {
  std::vector<float> small_avg(2), large_avg(2);
  auto before = shm_messages();
  with_group(test_config(0, 2, 0, reduce_mode::exchange),
             [&](int r, learner_group& g) {
               torch::nn::Linear small{4, 4};
               // 600 x 600 floats: 1.44 MB, above shm_link::capacity.
               torch::nn::Linear large{600, 600};
               for (auto* m : {&*small, &*large})
                 for (auto& p : m->parameters())
                   p.mutable_grad() = torch::full_like(p, r + 1.0);
               ASSERT_FALSE(g.all_reduce_gradients(*small));
               ASSERT_FALSE(g.all_reduce_gradients(*large));
               ASSERT_FALSE(g.all_reduce_gradients(*small));
               auto i = static_cast<std::size_t>(r);
               small_avg[i] = small->weight.grad().mean().item<float>();
               large_avg[i] = large->weight.grad().min().item<float>();
             });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FLOAT_EQ(small_avg[static_cast<std::size_t>(r)], 1.5f);
    EXPECT_FLOAT_EQ(large_avg[static_cast<std::size_t>(r)], 1.5f);
  }
  // The two small messages of each rank (both ranks count here: one
  // process), not the large one.
  EXPECT_EQ(shm_messages() - before, 4u);
}

TEST(LearnerGroupShm, APeerLeavingWhileTheOtherWaitsInSharedMemoryEndsTheStep) {
  auto before = shm_messages();
  auto x = leave_mid_step(test_config(0, 2, 0, reduce_mode::exchange), 70);
  EXPECT_GE(shm_messages() - before, 2u) << "step 1 did not use shared memory";
  EXPECT_TRUE(is_failure(x.err)) << render(x.err);
  EXPECT_LT(x.fail_ms, 5000.0) << render(x.err); // the step timeout is 10 s
  EXPECT_TRUE(x.later_failed);
}

TEST(LearnerGroupShm, AHungPeerEndsTheStepInSharedMemoryAtTheTimeout) {
  auto base = test_config(0, 2, 0, reduce_mode::exchange);
  base.timeout = 1000ms;
  auto before = shm_messages();
  auto x = hang_mid_step(base, 80);
  EXPECT_GE(shm_messages() - before, 2u) << "step 1 did not use shared memory";
  EXPECT_TRUE(is(x.err, errc::timeout)) << render(x.err);
  EXPECT_GE(x.fail_ms, 900.0);
  EXPECT_LT(x.fail_ms, 1000.0 + 4000.0);
}

// A file of this process of `n` bytes, as an fd (the test's to close).
int file_of(std::size_t n, bool sealed, const std::string& head) {
  int fd = ::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(n)) != 0)
    return -1;
  if (!head.empty() && ::pwrite(fd, head.data(), head.size(), 0) < 0)
    return -1;
  if (sealed && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    return -1;
  return fd;
}

TEST(LearnerGroupShm, ForgedOffersMapNothing) {
  auto genuine = shm_link::make();
  ASSERT_TRUE(genuine);
  auto real = genuine->offer();
  auto size = [&] {
    struct stat st {};
    ::fstat(static_cast<int>(real.fd), &st);
    return static_cast<std::size_t>(st.st_size);
  }();
  auto token = std::string(real.token, sizeof(real.token));
  auto attach = [](const shm_offer& o) {
    auto reader = shm_link::make();
    return reader && reader->attach(o);
  };
  std::vector<int> fds;
  auto forged = [&](std::size_t n, bool sealed, const std::string& head) {
    auto o = real;
    int fd = file_of(n, sealed, head);
    fds.push_back(fd);
    o.fd = static_cast<std::uint32_t>(fd);
    return o;
  };
  std::vector<std::pair<const char*, shm_offer>> attempts;
  auto o = real;
  o.magic[7] = 'x';
  attempts.emplace_back("wrong magic", o);
  o = real;
  o.capacity = shm_link::capacity * 2;
  attempts.emplace_back("another capacity", o);
  o = real;
  o.token[0] = static_cast<char>(o.token[0] ^ 1);
  attempts.emplace_back("another token", o);
  attempts.emplace_back("an unsealed segment with the token",
                        forged(size, false, token));
  attempts.emplace_back("a sealed segment too small",
                        forged(size / 2, true, token));
  o = real;
  o.fd = 987654;
  attempts.emplace_back("an fd the peer does not have", o);
  o = real;
  o.pid = 0x7ffffff0;
  attempts.emplace_back("a process that does not exist", o);
  for (auto& [what, offer] : attempts)
    EXPECT_FALSE(attach(offer)) << what;
  EXPECT_TRUE(attach(real)) << "the genuine offer";
  for (auto fd : fds)
    if (fd >= 0)
      ::close(fd);
}

} // namespace dice::test::shm
