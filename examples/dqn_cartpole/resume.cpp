// Where a DQN run starts: the output folder, the resume point (latest.pt,
// latest.json, best.json), and the network and model exchangers every
// node builds.

#include "dice/core/errc.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/torch/model.hpp"

#include "shared_run.hpp"

#include <filesystem>

namespace dqn {

q_network make_net(const run_options& opts, const std::string& resume_from) {
  q_network net{opts.algo.hidden};
  if (!resume_from.empty())
    load_q_network(net, resume_from);
  return net;
}

caf::expected<std::string> open_outputs(shared_run& run,
                                        const std::string& metrics_name,
                                        bool need_checkpoint,
                                        std::uint32_t node, bool restarted) {
  auto& opts = run.opts;
  if (auto err = demo::make_run_dir(opts.out))
    return err;
  std::string resume_from;
  if (opts.resume) {
    resume_from = path_in(opts, "latest.pt");
    if (!std::filesystem::exists(resume_from)) {
      if (need_checkpoint)
        return dice::make_error(dice::errc::invalid_config,
                                "--resume: " + resume_from + " does not exist");
      resume_from.clear();
    }
    // Counters of a file that is missing or not ours read as 0.
    auto latest = demo::read_json(path_in(opts, "latest.json"));
    auto counter = [&](const char* name) {
      auto it = latest.find(name);
      return it != latest.end() && it->is_number_integer()
        ? it->get<std::int64_t>()
        : std::int64_t{0};
    };
    auto env_step = counter("env_step");
    auto train_iter = counter("train_iter");
    auto env_episode = counter("env_episode");
    run.resume_env_step = env_step;
    run.resume_train_iter = train_iter;
    run.resume_env_episode = env_episode;
    // best.pt is only replaced by a model that beats the one it holds.
    auto best = demo::read_json(path_in(opts, "best.json"));
    if (best.contains("eval_return") && best["eval_return"].is_number())
      run.best = best["eval_return"].get<double>();
    dice::log::info(node,
                    "resuming from "
                      + (resume_from.empty() ? std::string{"the learner"}
                                             : resume_from)
                      + " (env_step " + std::to_string(env_step)
                      + ", train_iter " + std::to_string(train_iter)
                      + ", env_episode " + std::to_string(env_episode) + ")");
  }
  if (auto err = run.metrics.open(path_in(opts, metrics_name),
                                  opts.resume || restarted))
    return err;
  return resume_from;
}

/// The learner's model exchanger: per iteration, or periodical (send).
dice::middleware learner_models(q_network net, const run_options& opts) {
  if (!opts.periodical)
    return dice::model_exchanger(dice::model_port_of(net.ptr()));
  dice::periodical_model_exchanger_options send_opts;
  send_opts.mode = dice::exchange_mode::send;
  send_opts.period = opts.model_period;
  return dice::periodical_model_exchanger(dice::model_port_of(net.ptr()),
                                          send_opts);
}

/// A collector's model exchanger: per iteration, or periodical (receive).
dice::middleware collector_models(q_network net, const run_options& opts) {
  auto port = dice::model_port_of(net.ptr());
  if (!opts.periodical)
    return dice::model_exchanger(port);
  dice::periodical_model_exchanger_options recv;
  recv.mode = dice::exchange_mode::receive;
  recv.period = opts.model_period;
  recv.stale_toleration = opts.stale_toleration;
  return dice::periodical_model_exchanger(port, recv);
}

} // namespace dqn
