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
//   BM_allreduce/mode:M/bytes:B   M: 0 flat, 1 bucketed 1 MiB, 2 bucketed 4 MiB
//   BM_tcp_exchange/bytes:B       the raw-TCP baseline
//   BM_local_step/bytes:B         forward+backward+Adam of that model, alone
// Models: B = 6824968 (1.7M floats, four Linear layers) and B = 18440 (the
// DQN demo's 4-64-64-2 Q-network, hidden = 64).

#include "dice/core/errc.hpp"
#include "dice/torch/learner_group.hpp"

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

constexpr std::int64_t big_bytes = 6824968;
constexpr std::int64_t dqn_bytes = 18440;

// The three ways of reducing that are compared.
constexpr int mode_count = 3;

dice::learner_group_config mode_config(int mode) {
  dice::learner_group_config c;
  c.size = 2;
  c.timeout = std::chrono::seconds{30};
  c.mode = mode == 0 ? dice::reduce_mode::flat : dice::reduce_mode::bucketed;
  c.bucket_bytes = mode == 2 ? (std::size_t{4} << 20) : (std::size_t{1} << 20);
  return c;
}

// A model with `bytes` of float parameters and defined gradients.
std::shared_ptr<torch::nn::Sequential> make_model(std::int64_t bytes) {
  torch::manual_seed(1);
  auto m = std::make_shared<torch::nn::Sequential>();
  if (bytes == big_bytes) {
    (*m)->push_back(torch::nn::Linear(1024, 1024));
    (*m)->push_back(torch::nn::Linear(1024, 512));
    (*m)->push_back(torch::nn::Linear(512, 256));
    (*m)->push_back(torch::nn::Linear(256, 2));
  } else {
    (*m)->push_back(torch::nn::Linear(4, 64));
    (*m)->push_back(torch::nn::Functional(torch::relu));
    (*m)->push_back(torch::nn::Linear(64, 64));
    (*m)->push_back(torch::nn::Functional(torch::relu));
    (*m)->push_back(torch::nn::Linear(64, 2));
  }
  for (auto& p : (*m)->parameters())
    p.mutable_grad() = torch::randn_like(p);
  return m;
}

std::int64_t model_bytes(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (auto& p : m.parameters())
    n += p.numel() * static_cast<std::int64_t>(p.element_size());
  return n;
}

struct command {
  std::int32_t kind; // 0 all-reduce, 1 tcp exchange, 2 stop
  std::int32_t mode;
  std::int64_t bytes;
  std::int64_t iterations;
};

bool send_all(int fd, const void* p, std::size_t n) {
  auto c = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::write(fd, c, n);
    if (k <= 0)
      return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* p, std::size_t n) {
  auto c = static_cast<char*>(p);
  while (n > 0) {
    auto k = ::read(fd, c, n);
    if (k <= 0)
      return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

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

void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // As large as Gloo asks for its pairs (it requests 32 MiB; the kernel caps
  // both at net.core.{w,r}mem_max), so the baseline is not handicapped.
  int big = 32 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
}

// -- shared state of both ranks ---------------------------------------------

struct rank_state {
  int control = -1;
  int data = -1; // raw TCP socket for the baseline
  std::unique_ptr<duplex> link;
  std::vector<dice::learner_group> groups;
  std::shared_ptr<torch::nn::Sequential> big, dqn;
  std::vector<char> out, in;

  torch::nn::Module& model(std::int64_t bytes) {
    return bytes == big_bytes ? **big : **dqn;
  }
};

rank_state* state = nullptr;

// Runs one command; both ranks do the same.
bool run(rank_state& s, const command& c) {
  if (c.kind == 0) {
    auto& m = s.model(c.bytes);
    for (std::int64_t i = 0; i < c.iterations; ++i)
      if (auto err = s.groups[static_cast<std::size_t>(c.mode)]
                       .all_reduce_gradients(m)) {
        std::fprintf(stderr, "all-reduce: %s\n", dice::render(err).c_str());
        return false;
      }
    return true;
  }
  for (std::int64_t i = 0; i < c.iterations; ++i)
    if (!s.link->exchange(s.out.data(), s.in.data(),
                          static_cast<std::size_t>(c.bytes)))
      return false;
  return true;
}

int peer_main(int control) {
  torch::set_num_threads(1);
  rank_state s;
  s.control = control;
  s.big = make_model(big_bytes);
  s.dqn = make_model(dqn_bytes);
  s.out.assign(static_cast<std::size_t>(big_bytes), 1);
  s.in.assign(static_cast<std::size_t>(big_bytes), 0);
  std::uint16_t ports[mode_count + 1];
  if (!recv_all(control, ports, sizeof(ports)))
    return 1;
  for (int m = 0; m < mode_count; ++m) {
    auto c = mode_config(m);
    c.rank = 1;
    c.store_port = ports[m];
    auto g = dice::learner_group::form(c);
    if (!g) {
      std::fprintf(stderr, "peer: %s\n", dice::render(g.error()).c_str());
      return 2;
    }
    s.groups.push_back(std::move(*g));
  }
  s.data = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(ports[mode_count]);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.data, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return 3;
  tune(s.data);
  s.link = std::make_unique<duplex>(s.data);
  for (;;) {
    command c;
    if (!recv_all(control, &c, sizeof(c)) || c.kind == 2)
      return 0;
    char ok = run(s, c) ? 1 : 0;
    if (!send_all(control, &ok, 1))
      return 4;
  }
}

bool setup_rank0(rank_state& s) {
  torch::set_num_threads(1);
  s.big = make_model(big_bytes);
  s.dqn = make_model(dqn_bytes);
  s.out.assign(static_cast<std::size_t>(big_bytes), 2);
  s.in.assign(static_cast<std::size_t>(big_bytes), 0);
  std::uint16_t ports[mode_count + 1];
  for (int m = 0; m < mode_count; ++m) {
    auto g = dice::learner_group::create(mode_config(m));
    if (!g)
      return false;
    ports[m] = g->store_port();
    s.groups.push_back(std::move(*g));
  }
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len);
  ::listen(ls, 1);
  ports[mode_count] = ntohs(addr.sin_port);
  if (!send_all(s.control, ports, sizeof(ports)))
    return false;
  for (auto& g : s.groups)
    if (auto err = g.join()) {
      std::fprintf(stderr, "rank 0: %s\n", dice::render(err).c_str());
      return false;
    }
  s.data = ::accept(ls, nullptr, nullptr);
  ::close(ls);
  tune(s.data);
  s.link = std::make_unique<duplex>(s.data);
  return s.data >= 0;
}

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
  void report(benchmark::State& st) {
    if (us_.empty())
      return;
    std::sort(us_.begin(), us_.end());
    st.counters["p50_us"] = us_[us_.size() / 2];
    st.counters["p90_us"] = us_[us_.size() * 9 / 10];
  }

 private:
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> us_;
};

void BM_allreduce(benchmark::State& st) {
  auto mode = static_cast<std::int32_t>(st.range(0));
  auto bytes = st.range(1);
  auto& m = state->model(bytes);
  auto& g = state->groups[static_cast<std::size_t>(mode)];
  iteration_timer timer;
  start_peer(st, 0, mode, bytes);
  for (auto _ : st) {
    timer.start();
    if (auto err = g.all_reduce_gradients(m)) {
      st.SkipWithError(dice::render(err).c_str());
      break;
    }
    timer.stop();
  }
  finish_peer(st);
  timer.report(st);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations())
                       * model_bytes(m));
}

void BM_tcp_exchange(benchmark::State& st) {
  auto bytes = st.range(0);
  iteration_timer timer;
  start_peer(st, 1, 0, bytes);
  for (auto _ : st) {
    timer.start();
    if (!state->link->exchange(state->out.data(), state->in.data(),
                               static_cast<std::size_t>(bytes))) {
      st.SkipWithError("exchange failed");
      break;
    }
    timer.stop();
  }
  finish_peer(st);
  timer.report(st);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * bytes);
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
  iteration_timer timer;
  for (auto _ : st) {
    timer.start();
    opt.zero_grad();
    auto loss = (*model)->forward(x).pow(2).mean();
    loss.backward();
    opt.step();
    timer.stop();
  }
  timer.report(st);
}

BENCHMARK(BM_tcp_exchange)
  ->ArgNames({"bytes"})
  ->Arg(big_bytes)
  ->Arg(dqn_bytes)
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_allreduce)
  ->ArgNames({"mode", "bytes"})
  ->ArgsProduct({{0, 1, 2}, {big_bytes, dqn_bytes}})
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);
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
  auto parent = ::getpid();
  auto pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      _exit(1);
    ::close(sv[0]);
    _exit(peer_main(sv[1]));
  }
  ::close(sv[1]);
  rank_state s;
  s.control = sv[0];
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
