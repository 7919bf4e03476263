#include "dice/rl/network.hpp"

namespace dice::rl {

torch::nn::Sequential mlp(std::int64_t in,
                          const std::vector<std::int64_t>& hidden,
                          std::int64_t out, activation act) {
  torch::nn::Sequential seq;
  auto width = in;
  for (auto h : hidden) {
    seq->push_back(torch::nn::Linear(width, h));
    if (act == activation::relu)
      seq->push_back(torch::nn::ReLU());
    else
      seq->push_back(torch::nn::Tanh());
    width = h;
  }
  seq->push_back(torch::nn::Linear(width, out));
  return seq;
}

} // namespace dice::rl
