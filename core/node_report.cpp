#include "dice/core/node_report.hpp"

#include <nlohmann/json.hpp>

namespace dice {

std::string to_json(const node_report& x) {
  nlohmann::ordered_json j;
  j["node"] = x.node;
  j["role"] = to_string(x.roles);
  j["total_step"] = x.total_step;
  j["iterations"] = x.iterations;
  j["env_step"] = x.env_step;
  j["env_episode"] = x.env_episode;
  j["train_iter"] = x.train_iter;
  j["model_version"] = x.model_version;
  j["trajectories_received"] = x.trajectories_received;
  j["deltas_received"] = x.deltas_received;
  j["models_loaded"] = x.models_loaded;
  j["models_sent"] = x.models_sent;
  j["models_dropped"] = x.models_dropped;
  j["timeouts"] = x.timeouts;
  j["restarts"] = x.restarts;
  j["stop_reason"] = x.stop_reason;
  j["failed"] = x.failed;
  return j.dump(-1, ' ', false,
                nlohmann::ordered_json::error_handler_t::replace);
}

} // namespace dice
