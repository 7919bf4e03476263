#pragma once

// What allreduce_bench's two ranks share (main.cpp says what is measured):
// the models, the learner groups, the control commands and the raw-TCP link
// of the baseline.

#include "dice/torch/learner_group.hpp"

#include <torch/torch.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dice::bench::allreduce {

constexpr std::int64_t big_bytes = 6824968;
constexpr std::int64_t dqn_bytes = 18440;

// The ways of reducing that are compared: 0 flat, 1 bucketed 1 MiB, 2
// bucketed 4 MiB, 3 exchange 256 KiB, 4 exchange 1 MiB, 5 exchange 4 MiB
// (since the exchange sends one message per step, 3-5 differ only in the
// config), 6 the default config (automatic: the exchange at L = 2).
constexpr int mode_count = 7;

/// The learner group of reduce mode `mode` (see mode_count).
dice::learner_group_config mode_config(int mode);

/// One DQN learner step of the demo's Q-net on `m` (batch 64, forward,
/// backward, Adam), the gradients averaged through `g` if given.
bool dqn_step(torch::nn::Module& m, torch::optim::Optimizer& opt,
              const torch::Tensor& x, dice::learner_group* g);

/// A model with `bytes` of float parameters and defined gradients.
std::shared_ptr<torch::nn::Sequential> make_model(std::int64_t bytes);

/// The bytes of `m`'s parameters.
std::int64_t model_bytes(torch::nn::Module& m);

struct command {
  // 0 all-reduce, 1 tcp exchange, 2 stop, 3 DQN step through the group,
  // 4 DQN step through the raw TCP exchange, 5 DQN step alone (both ranks
  // at once, unsynchronized), 6 DQN step alone then a 4-byte raw-TCP
  // barrier (both ranks in phase, nothing reduced)
  std::int32_t kind;
  std::int32_t mode;
  std::int64_t bytes;
  std::int64_t iterations;
};

/// Writes all `n` bytes; false if the socket fails.
bool send_all(int fd, const void* p, std::size_t n);

/// Reads all `n` bytes; false if the socket fails or closes.
bool recv_all(int fd, void* p, std::size_t n);

// Sends `n` bytes and receives `n` bytes on `fd` at once: a sender thread
// writes while the calling thread reads (as Gloo overlaps its sends and
// receives on separate threads), so the baseline is full duplex.
class duplex {
 public:
  explicit duplex(int fd)
    : fd_(fd), sender_([this] {
        send_loop();
      }) {}

  ~duplex() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stop_ = true;
    }
    cv_.notify_all();
    sender_.join();
  }

  bool exchange(const char* out, char* in, std::size_t n) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      out_ = out;
      n_ = n;
      ++requested_;
    }
    cv_.notify_all();
    auto ok = recv_all(fd_, in, n);
    std::unique_lock<std::mutex> guard{mtx_};
    cv_.wait(guard, [&] {
      return sent_ == requested_;
    });
    return ok && send_ok_;
  }

 private:
  void send_loop() {
    std::unique_lock<std::mutex> guard{mtx_};
    for (;;) {
      cv_.wait(guard, [&] {
        return stop_ || sent_ < requested_;
      });
      if (stop_)
        return;
      auto out = out_;
      auto n = n_;
      guard.unlock();
      auto ok = send_all(fd_, out, n);
      guard.lock();
      send_ok_ = send_ok_ && ok;
      ++sent_;
      cv_.notify_all();
    }
  }

  int fd_;
  std::mutex mtx_;
  std::condition_variable cv_;
  const char* out_ = nullptr;
  std::size_t n_ = 0;
  std::uint64_t requested_ = 0;
  std::uint64_t sent_ = 0;
  bool send_ok_ = true;
  bool stop_ = false;
  std::thread sender_;
};

/// No Nagle, and socket buffers as large as Gloo's.
void tune(int fd);

// -- shared state of both ranks ---------------------------------------------

struct rank_state {
  int control = -1;
  int data = -1; // raw TCP socket for the baseline
  std::unique_ptr<duplex> link;
  std::vector<dice::learner_group> groups;
  std::shared_ptr<torch::nn::Sequential> big, dqn;
  // The DQN step's own model and optimizer (the same seed on both ranks).
  std::shared_ptr<torch::nn::Sequential> step_net;
  std::unique_ptr<torch::optim::Adam> step_opt;
  torch::Tensor step_x;
  std::vector<char> out, in;

  torch::nn::Module& model(std::int64_t bytes) {
    return bytes == big_bytes ? **big : **dqn;
  }
};

/// A fresh step model, optimizer and batch (the same seed on both ranks).
void make_step(rank_state& s);

/// One DQN step of `s`'s step model, the gradients averaged through the
/// raw-TCP link of the baseline: what the grouped step would cost if the
/// all-reduce cost only a raw exchange.
bool dqn_step_tcp(rank_state& s);

/// Runs one command; both ranks do the same.
bool run(rank_state& s, const command& c);

/// Rank 1: forms the groups with rank 0, then runs rank 0's commands from
/// `control` until told to stop. Returns the process's exit code.
int peer_main(int control);

/// Rank 0: creates the groups, tells rank 1 their ports over `s.control`
/// and connects the baseline's socket.
bool setup_rank0(rank_state& s);

} // namespace dice::bench::allreduce
