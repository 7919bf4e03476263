#include "dice/pipeline/middleware.hpp"

#include "dice/core/model.hpp"

namespace dice {

node_services::~node_services() {
  // nop
}

model_port::~model_port() {
  // nop
}

middleware void_middleware(std::string name) {
  middleware result;
  result.name = std::move(name);
  return result;
}

} // namespace dice
