// All-reduce of a gradient across 2 learner processes (dice::learner_group,
// c10d's ProcessGroupGloo over loopback TCP), against its baseline measured
// in the same run: raw loopback TCP moving the same bytes. With two ranks a
// ring all-reduce of N bytes sends N and receives N bytes on each rank, so
// the baseline is a full-duplex exchange: each process sends N bytes and
// receives N bytes at the same time.
//
// This process is rank 0 and runs Google Benchmark; it forks rank 1 before
// anything else starts. Before each benchmark run rank 0 tells rank 1 over a
// control socket what to do and how many iterations, so both run in step.
//   BM_allreduce/mode:M/bytes:B   M: 0 flat, 1 bucketed 1 MiB, 2 bucketed
//                                 4 MiB, 3/4/5 exchange 256 KiB/1 MiB/4 MiB,
//                                 6 the default config (automatic: the
//                                 exchange at L = 2)
//   BM_dqn_step_group/mode:M      a DQN step on both ranks, all-reduce between
//   BM_dqn_step_tcp               the same, averaged through the raw-TCP link
//   BM_dqn_step_both              the step alone on both ranks at once
//   BM_dqn_step_barrier           the same, in phase (a 4-byte barrier)
//   BM_tcp_exchange/bytes:B       the raw-TCP baseline
//   BM_local_step/bytes:B         forward+backward+Adam of that model, alone
// Models: B = 6824968 (1.7M floats, four Linear layers) and B = 18440 (the
// DQN demo's 4-64-64-2 Q-network, hidden = 64).
//
// ranks.cpp sets up both ranks; link.cpp is the raw-TCP side.

#include "dice/core/errc.hpp"
#include "dice/process/unique_fd.hpp"

#include "allreduce_bench.hpp"
#include <benchmark/benchmark.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace dice::bench::allreduce;

rank_state* state = nullptr;

// Tells rank 1 what this run does; it starts as soon as it reads it.
void start_peer(benchmark::State& st, std::int32_t kind, std::int32_t mode,
                std::int64_t bytes) {
  command c{kind, mode, bytes, static_cast<std::int64_t>(st.max_iterations)};
  if (!send_all(state->control, &c, sizeof(c)))
    st.SkipWithError("control channel closed");
}

void finish_peer(benchmark::State& st) {
  char ok = 0;
  if (!recv_all(state->control, &ok, 1) || !ok)
    st.SkipWithError("rank 1 failed");
}

// Times each iteration: on a machine shared with other jobs the mean is
// the scheduler's tail; the median (p50_us) is the operation's own cost.
class iteration_timer {
 public:
  void start() {
    t0_ = std::chrono::steady_clock::now();
  }
  void stop() {
    us_.push_back(std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - t0_)
                    .count());
  }
  void report(benchmark::State& st, const std::string& prefix = "") {
    if (us_.empty())
      return;
    std::sort(us_.begin(), us_.end());
    st.counters[prefix + "p50_us"] = us_[us_.size() / 2];
    st.counters[prefix + "p90_us"] = us_[us_.size() * 9 / 10];
  }

 private:
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> us_;
};

// Runs the benchmark's iterations with rank 1 doing `kind` (start_peer's
// arguments), timing `step` (an error text; empty: it worked) in each.
template <class Step>
void timed_on_peer(benchmark::State& st, std::int32_t kind, std::int32_t mode,
                   std::int64_t bytes, Step step) {
  iteration_timer timer;
  start_peer(st, kind, mode, bytes);
  for (auto _ : st) {
    timer.start();
    auto err = step();
    if (!err.empty()) {
      st.SkipWithError(err.c_str());
      break;
    }
    timer.stop();
  }
  finish_peer(st);
  timer.report(st);
}

void BM_allreduce(benchmark::State& st) {
  auto mode = static_cast<std::int32_t>(st.range(0));
  auto bytes = st.range(1);
  auto& m = state->model(bytes);
  auto& g = state->groups[static_cast<std::size_t>(mode)];
  timed_on_peer(st, 0, mode, bytes, [&] {
    auto err = g.all_reduce_gradients(m);
    return err ? dice::render(err) : std::string{};
  });
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations())
                       * model_bytes(m));
}

void BM_tcp_exchange(benchmark::State& st) {
  auto bytes = st.range(0);
  timed_on_peer(st, 1, 0, bytes, [&] {
    return state->link->exchange(state->out.data(), state->in.data(),
                                 static_cast<std::size_t>(bytes))
      ? std::string{}
      : std::string{"exchange failed"};
  });
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * bytes);
}

// A DQN step of the step model on both ranks at once (rank 1 runs `kind`),
// with the step's parts timed apart (backward_p50_us, update_p50_us) and
// `between(err)` run between backward and update, timed as `between_name`
// (empty: nothing runs there). Starts from a fresh model, as rank 1 does.
template <class Between>
void timed_step_parts(benchmark::State& st, std::int32_t kind,
                      std::int32_t mode, const char* between_name,
                      Between between) {
  make_step(*state);
  auto& net = **state->step_net;
  auto& opt = *state->step_opt;
  iteration_timer timer, backward, middle, update;
  start_peer(st, kind, mode, dqn_bytes);
  for (auto _ : st) {
    timer.start();
    backward.start();
    opt.zero_grad();
    net.forward(state->step_x).pow(2).mean().backward();
    backward.stop();
    middle.start();
    if (auto err = between(net); !err.empty()) {
      st.SkipWithError(err.c_str());
      break;
    }
    middle.stop();
    update.start();
    opt.step();
    update.stop();
    timer.stop();
  }
  finish_peer(st);
  timer.report(st);
  backward.report(st, "backward_");
  if (*between_name != 0)
    middle.report(st, between_name);
  update.report(st, "update_");
}

// A DQN learner step on both ranks at once, the gradients averaged by the
// group of mode M in between (as rl/dqn_learner.cpp does): the whole cost
// of a data-parallel step, to compare with BM_local_step/bytes:18440. The
// all-reduce (the exchange plus the wait for the other rank's gradient) is
// timed apart: reduce_p50_us.
void BM_dqn_step_group(benchmark::State& st) {
  auto mode = static_cast<std::int32_t>(st.range(0));
  auto& g = state->groups[static_cast<std::size_t>(mode)];
  timed_step_parts(st, 3, mode, "reduce_", [&](torch::nn::Module& net) {
    auto err = g.all_reduce_gradients(net);
    return err ? dice::render(err) : std::string{};
  });
}

// The same step with the gradients averaged through the raw-TCP link (one
// packed buffer, the baseline's exchange, (a + b) / 2): the bound for
// BM_dqn_step_group on this machine.
void BM_dqn_step_tcp(benchmark::State& st) {
  make_step(*state);
  timed_on_peer(st, 4, 0, dqn_bytes, [] {
    return dqn_step_tcp(*state) ? std::string{}
                                : std::string{"the raw-TCP step failed"};
  });
}

// The step alone on both ranks at once, neither waiting for the other: what
// two processes stepping side by side cost each other on this machine
// (caches, memory, the hypervisor), without any exchange or wait.
void BM_dqn_step_both(benchmark::State& st) {
  timed_step_parts(st, 5, 0, "", [](torch::nn::Module&) {
    return std::string{};
  });
}

// The step alone on both ranks, kept in phase by a 4-byte raw-TCP barrier
// after each (timed apart: barrier_p50_us): whether stepping in phase
// alone slows the step's parts, with no all-reduce at all.
void BM_dqn_step_barrier(benchmark::State& st) {
  make_step(*state);
  iteration_timer timer, barrier;
  start_peer(st, 6, 0, dqn_bytes);
  for (auto _ : st) {
    timer.start();
    if (!dqn_step(**state->step_net, *state->step_opt, state->step_x,
                  nullptr)) {
      st.SkipWithError("the step failed");
      break;
    }
    barrier.start();
    if (!state->link->exchange(state->out.data(), state->in.data(), 4)) {
      st.SkipWithError("the barrier failed");
      break;
    }
    barrier.stop();
    timer.stop();
  }
  finish_peer(st);
  timer.report(st);
  barrier.report(st, "barrier_");
}

// A learner's own work per step on that model, for the scaling estimate:
// forward and backward of a batch of 64, then Adam.
void BM_local_step(benchmark::State& st) {
  auto bytes = st.range(0);
  auto model = make_model(bytes);
  auto in = bytes == big_bytes ? 1024 : 4;
  torch::optim::Adam opt{(*model)->parameters(),
                         torch::optim::AdamOptions(1e-3)};
  auto x = torch::randn({64, in});
  iteration_timer timer, backward, update;
  for (auto _ : st) {
    timer.start();
    backward.start();
    opt.zero_grad();
    auto loss = (*model)->forward(x).pow(2).mean();
    loss.backward();
    backward.stop();
    update.start();
    opt.step();
    update.stop();
    timer.stop();
  }
  timer.report(st);
  backward.report(st, "backward_");
  update.report(st, "update_");
}

BENCHMARK(BM_tcp_exchange)
  ->ArgNames({"bytes"})
  ->Arg(big_bytes)
  ->Arg(dqn_bytes)
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_allreduce)
  ->ArgNames({"mode", "bytes"})
  ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {big_bytes, dqn_bytes}})
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dqn_step_group)
  ->ArgNames({"mode"})
  ->Arg(1)
  ->Arg(6)
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dqn_step_tcp)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dqn_step_both)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dqn_step_barrier)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_local_step)
  ->ArgNames({"bytes"})
  ->Arg(big_bytes)
  ->Arg(dqn_bytes)
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);

} // namespace

int main(int argc, char** argv) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    return 1;
  // Rank 0 keeps one end, rank 1 (the child) the other.
  dice::unique_fd ours{sv[0]};
  dice::unique_fd theirs{sv[1]};
  auto parent = ::getpid();
  auto pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      _exit(1);
    ours.reset();
    _exit(peer_main(theirs.get()));
  }
  theirs.reset();
  rank_state s;
  s.control = ours.get();
  state = &s;
  if (!setup_rank0(s)) {
    std::fprintf(stderr, "allreduce_bench: the group did not form\n");
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  command stop{2, 0, 0, 0};
  send_all(s.control, &stop, sizeof(stop));
  int status = 0;
  ::waitpid(pid, &status, 0);
  state = nullptr;
  return 0;
}
