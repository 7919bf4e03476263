#pragma once

// The settings of a dice node in an in-process test on loopback: secret_1,
// no peer-loss stop (a test ends its nodes itself).

#include "dice/runtime/node_config.hpp"

#include "support/secret_file.hpp"

#include <chrono>
#include <cstdint>

namespace dice::test {

/// Node `id` with `roles` on 127.0.0.1, listening for peers if `listen`.
inline node_config loopback_node_config(std::uint32_t id, role_set roles,
                                        bool listen) {
  node_config nc;
  nc.id = id;
  nc.roles = roles;
  nc.distributed = true;
  nc.listen = listen;
  nc.host = "127.0.0.1";
  nc.peer_loss_timeout = std::chrono::hours{1};
  nc.secret = secret_1;
  return nc;
}

} // namespace dice::test
