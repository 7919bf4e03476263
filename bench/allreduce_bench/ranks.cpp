// The two ranks of allreduce_bench: their models and groups, how they set
// up, and the commands rank 1 runs in step with rank 0.

#include "dice/core/errc.hpp"
#include "dice/process/unique_fd.hpp"

#include "allreduce_bench.hpp"
#include "loopback.hpp"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace dice::bench::allreduce {

dice::learner_group_config mode_config(int mode) {
  dice::learner_group_config c;
  c.size = 2;
  c.timeout = std::chrono::seconds{30};
  if (mode == 6)
    return c; // the default config
  c.mode = mode == 0 ? dice::reduce_mode::flat
    : mode <= 2      ? dice::reduce_mode::bucketed
                     : dice::reduce_mode::exchange;
  c.bucket_bytes = mode == 3 ? (std::size_t{256} << 10)
    : mode == 2 || mode == 5 ? (std::size_t{4} << 20)
                             : (std::size_t{1} << 20);
  return c;
}

bool dqn_step(torch::nn::Module& m, torch::optim::Optimizer& opt,
              const torch::Tensor& x, dice::learner_group* g) {
  auto& net = dynamic_cast<torch::nn::SequentialImpl&>(m);
  opt.zero_grad();
  auto loss = net.forward(x).pow(2).mean();
  loss.backward();
  if (g != nullptr)
    if (auto err = g->all_reduce_gradients(m)) {
      std::fprintf(stderr, "all-reduce: %s\n", dice::render(err).c_str());
      return false;
    }
  opt.step();
  return true;
}

void make_step(rank_state& s) {
  s.step_net = make_model(dqn_bytes);
  s.step_opt = std::make_unique<torch::optim::Adam>(
    (*s.step_net)->parameters(), torch::optim::AdamOptions(1e-3));
  s.step_x = torch::randn({64, 4});
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

bool dqn_step_tcp(rank_state& s) {
  auto& net = *s.step_net;
  s.step_opt->zero_grad();
  auto loss = net->forward(s.step_x).pow(2).mean();
  loss.backward();
  std::size_t off = 0;
  for (auto& p : net->parameters()) {
    auto bytes = static_cast<std::size_t>(p.numel()) * sizeof(float);
    std::memcpy(s.out.data() + off, p.grad().data_ptr(), bytes);
    off += bytes;
  }
  if (!s.link->exchange(s.out.data(), s.in.data(), off))
    return false;
  off = 0;
  for (auto& p : net->parameters()) {
    auto* g = static_cast<float*>(p.grad().data_ptr());
    auto* other = reinterpret_cast<const float*>(s.in.data() + off);
    for (std::int64_t i = 0; i < p.numel(); ++i)
      g[i] = (g[i] + other[i]) / 2.0f;
    off += static_cast<std::size_t>(p.numel()) * sizeof(float);
  }
  s.step_opt->step();
  return true;
}

// Runs one command; both ranks do the same.
bool run(rank_state& s, const command& c) {
  // Every DQN step row starts from the same fresh model and optimizer on
  // both ranks, as BM_local_step does: rows must not depend on how many
  // steps earlier rows took (the step's cost drifted by up to 15 % here).
  if (c.kind >= 3 && c.kind <= 6)
    make_step(s);
  if (c.kind == 4) {
    for (std::int64_t i = 0; i < c.iterations; ++i)
      if (!dqn_step_tcp(s))
        return false;
    return true;
  }
  if (c.kind == 6) { // the step alone, then a 4-byte raw-TCP barrier
    for (std::int64_t i = 0; i < c.iterations; ++i)
      if (!dqn_step(**s.step_net, *s.step_opt, s.step_x, nullptr)
          || !s.link->exchange(s.out.data(), s.in.data(), 4))
        return false;
    return true;
  }
  if (c.kind == 5) { // the step alone, while rank 0 steps too
    for (std::int64_t i = 0; i < c.iterations; ++i)
      if (!dqn_step(**s.step_net, *s.step_opt, s.step_x, nullptr))
        return false;
    return true;
  }
  if (c.kind == 3) {
    auto& g = s.groups[static_cast<std::size_t>(c.mode)];
    for (std::int64_t i = 0; i < c.iterations; ++i)
      if (!dqn_step(**s.step_net, *s.step_opt, s.step_x, &g))
        return false;
    return true;
  }
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
  make_step(s);
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
  make_step(s);
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
  dice::unique_fd ls{listen_loopback(1, ports[mode_count])};
  if (!ls)
    return false;
  if (!send_all(s.control, ports, sizeof(ports)))
    return false;
  for (auto& g : s.groups)
    if (auto err = g.join()) {
      std::fprintf(stderr, "rank 0: %s\n", dice::render(err).c_str());
      return false;
    }
  s.data = ::accept(ls.get(), nullptr, nullptr);
  ls.reset();
  tune(s.data);
  s.link = std::make_unique<duplex>(s.data);
  return s.data >= 0;
}

} // namespace dice::bench::allreduce
