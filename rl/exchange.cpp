#include "dice/rl/exchange.hpp"

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/learner_hello.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"

#include <algorithm>
#include <stdexcept>

namespace dice::rl {

namespace {

// The address a group's learner binds Gloo to and publishes as rank 0: the
// node's listen address, else its entry in dice.nodes, else loopback.
std::string group_address(const node_config& cfg) {
  if (!cfg.host.empty() && cfg.host != "0.0.0.0" && cfg.host != "::")
    return cfg.host;
  if (cfg.index < cfg.nodes.size() && !cfg.nodes[cfg.index].host.empty())
    return cfg.nodes[cfg.index].host;
  return "127.0.0.1";
}

middleware sending(model_port_ptr model, const model_exchange_options& x) {
  if (!x.periodical)
    return model_exchanger(std::move(model));
  periodical_model_exchanger_options o;
  o.mode = exchange_mode::send;
  o.period = x.period;
  return periodical_model_exchanger(std::move(model), o);
}

middleware receiving(model_port_ptr model, const model_exchange_options& x) {
  if (!x.periodical)
    return model_exchanger(std::move(model));
  periodical_model_exchanger_options o;
  o.mode = exchange_mode::receive;
  o.period = x.period;
  o.stale_toleration = x.stale_toleration;
  return periodical_model_exchanger(std::move(model), o);
}

} // namespace

std::shared_ptr<learner_group_member>
use_exchangers(node_setup& n, model_port_ptr model,
               const model_exchange_options& models, reduce_mode mode) {
  switch (n.role()) {
    case role::learner: {
      std::shared_ptr<learner_group_member> member;
      bool rank_zero = true;
      if (n.learners() > 1) {
        if (n.index() >= n.learners())
          throw std::runtime_error(
            "a learner of a group of " + std::to_string(n.learners())
            + " must be one of nodes 0.." + std::to_string(n.learners() - 1));
        learner_group_member_options mo;
        mo.rank = static_cast<int>(n.index());
        mo.size = static_cast<int>(n.learners());
        // Restarted by dice-launch: the group runs on without this
        // learner, which asks to be admitted again.
        mo.rejoin = n.distributed() && n.restarts() > 0;
        mo.max_nodes = std::max<std::uint32_t>(n.workers(), n.id() + 1);
        mo.address = group_address(n.config());
        // Gloo's pairs prove membership with the cluster secret.
        mo.secret = n.config().secret;
        mo.mode = mode;
        member = std::make_shared<learner_group_member>(mo);
        rank_zero = mo.rank == 0;
      }
      // Rank 0 alone greets the collectors and publishes models.
      if (rank_zero && n.restarts() > 0)
        n.use(learner_hello(model));
      context_exchanger_options co;
      if (member) {
        n.use(member->make_middleware());
        co.partition = member->partition();
      }
      n.use(context_exchanger(co));
      if (rank_zero)
        n.use(sending(std::move(model), models));
      return member;
    }
    case role::collector:
      n.use(context_exchanger()).use(receiving(std::move(model), models));
      return nullptr;
    default:
      n.use(context_exchanger()).use(model_exchanger(std::move(model)));
      return nullptr;
  }
}

} // namespace dice::rl
