#include "dice/rl/outputs.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dice::rl {

run_outputs::run_outputs(outputs_options opts, bool distributed,
                         std::uint32_t node)
  : opts_(std::move(opts)), distributed_(distributed), node_(node),
    start_(std::chrono::steady_clock::now()),
    cpu_start_(process_cpu_seconds()) {
  // nop
}

caf::error run_outputs::open() {
  if (auto err = make_run_dir(opts_.out))
    return err;
  if (opts_.resume) {
    resume_.resumed = true;
    // Counters of a file that is missing or not ours read as 0.
    auto latest = read_json(path("latest.json"));
    auto counter = [&](const char* name) {
      auto it = latest.find(name);
      return it != latest.end() && it->is_number_integer()
        ? it->get<std::int64_t>()
        : std::int64_t{0};
    };
    resume_.env_step = counter("env_step");
    resume_.train_iter = counter("train_iter");
    resume_.env_episode = counter("env_episode");
    // best.pt is only replaced by a model that beats the one it holds.
    auto best = read_json(path("best.json"));
    if (best.contains("eval_return") && best["eval_return"].is_number())
      resume_.best = best_ = best["eval_return"].get<double>();
  }
  auto name = distributed_ ? "metrics-" + std::to_string(node_) + ".jsonl"
                           : std::string{"metrics.jsonl"};
  return metrics_.open(path(name), opts_.resume);
}

std::shared_ptr<run_outputs> run_outputs::of(node_setup& n,
                                             const outputs_options& opts) {
  bool made = false;
  auto result = n.shared<run_outputs>([&] {
    made = true;
    return new run_outputs(opts, n.distributed(), n.id());
  });
  if (made) {
    // A node that dice-launch started again appends to its metrics.
    if (n.restarts() > 0)
      result->opts_.resume = result->opts_.resume || n.distributed();
    if (auto err = result->open())
      throw std::runtime_error(render(err));
    std::weak_ptr<run_outputs> weak = result;
    n.at_exit([weak](const run_result& r) {
      if (auto self = weak.lock())
        self->finish(r);
    });
  }
  return result;
}

caf::expected<std::shared_ptr<run_outputs>>
run_outputs::make(const outputs_options& opts, bool distributed,
                  std::uint32_t node) {
  std::shared_ptr<run_outputs> result{new run_outputs(opts, distributed, node)};
  if (auto err = result->open())
    return err;
  return result;
}

std::string run_outputs::path(const std::string& name) const {
  return path_in(opts_.out, name);
}

double run_outputs::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - start_)
    .count();
}

void run_outputs::metrics(std::uint32_t node, const std::string& role,
                          const json& fields) {
  metrics_.write(seconds(), node, role, fields);
}

void run_outputs::progress(const std::string& text) {
  if (!opts_.progress)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  if (!progress_)
    progress_.emplace(true);
  progress_->show(text);
}

eval_outcome run_outputs::record_eval(const eval_point& pt, bool solved) {
  eval_outcome result;
  std::lock_guard<std::mutex> guard{mtx_};
  evals_.push_back(pt);
  if (pt.mean > best_) {
    best_ = pt.mean;
    result.best = true;
  }
  if (solved && solve_seconds_ < 0) {
    solve_seconds_ = pt.seconds;
    solve_env_steps_ = pt.env_step;
    result.first_solve = true;
  }
  return result;
}

double run_outputs::last_eval() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return evals_.empty() ? std::numeric_limits<double>::quiet_NaN()
                        : evals_.back().mean;
}

std::vector<eval_point> run_outputs::evals() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return evals_;
}

void run_outputs::summarize(std::uint32_t node, json fields, std::string text) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& slot = extra_[node];
  if (slot.first.is_null())
    slot.first = json::object();
  slot.first.update(fields);
  slot.second += text;
}

void run_outputs::add_cpu(const std::string& component, double seconds) {
  std::lock_guard<std::mutex> guard{mtx_};
  cpu_[component] += seconds;
}

cpu_components run_outputs::cpu() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return cpu_;
}

namespace {

// The report the summary describes: this node's in a cluster, else the
// first learner's (it counts every collector's steps), else the first.
const node_report* main_report(const run_result& r) {
  for (auto& rep : r.reports)
    if (rep.roles.has(role::learner))
      return &rep;
  return r.reports.empty() ? nullptr : &r.reports.front();
}

} // namespace

json run_outputs::summary(const run_result& result) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto rep = main_report(result);
  node_report none;
  if (rep == nullptr)
    rep = &none;
  auto secs = std::max(result.seconds, 1e-9);
  // Steps a resumed run started from are not this run's work.
  auto resumed_steps = rep->roles.has(role::collector) ? 0 : resume_.env_step;
  json j;
  if (distributed_) {
    j["node"] = rep->node;
    j["roles"] = to_string(rep->roles);
  }
  j["solved"] = solve_seconds_ >= 0;
  j["solve_seconds"] = solve_seconds_;
  j["solve_env_steps"] = solve_env_steps_;
  j["best_eval"] = number(best_);
  j["last_eval"] = number(evals_.empty() ? std::nan("") : evals_.back().mean);
  j["evaluations"] = evals_.size();
  j["env_steps"] = rep->env_step;
  j["train_iters"] = rep->train_iter;
  j["learner_iterations"] = rep->roles.has(role::learner) ? rep->iterations : 0;
  j["seconds"] = result.seconds;
  j["env_steps_per_s"] = number(
    static_cast<double>(rep->env_step - resumed_steps) / secs);
  j["train_iters_per_s"] = number(
    static_cast<double>(rep->train_iter - resume_.train_iter) / secs);
  j["resumed_env_steps"] = resume_.env_step;
  for (auto& [node, extra] : extra_)
    j.update(extra.first);
  if (!cpu_.empty()) {
    // What the nodes measured, against what the process used and what the
    // machine had: the unmeasured CPU is dice's (exchangers, codecs,
    // segments, actors, outputs), the unused share idle.
    auto process = process_cpu_seconds() - cpu_start_;
    double measured = 0;
    json c = json::object();
    for (auto& [name, secs_in] : cpu_) {
      c[name] = secs_in;
      measured += secs_in;
    }
    auto cores = std::max(1u, std::thread::hardware_concurrency());
    c["dice_and_rest"] = std::max(0.0, process - measured);
    c["process"] = process;
    c["idle"] = std::max(0.0, secs * cores - process);
    c["cores"] = cores;
    j["cpu_seconds"] = c;
  }
  j["stop_reason"] = rep->stop_reason;
  j["failed"] = result.failed;
  return j;
}

void run_outputs::finish(const run_result& result) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    progress_.reset();
  }
  auto j = summary(result);
  auto evals = this->evals();
  auto rep = main_report(result);
  auto node = rep != nullptr ? rep->node : node_;
  auto roles = rep != nullptr ? rep->roles : role_set{};
  if (!evals.empty() || !distributed_)
    write_eval_plot(opts_.out, evals, opts_.title, opts_.stop_value, opts_.plot,
                    node);
  auto name = distributed_ ? "summary-" + std::to_string(node) + ".json"
                           : std::string{"summary.json"};
  if (auto err = write_json(path(name), j))
    log::error(node, "cannot write the summary: " + render(err));
  std::ostringstream os;
  os << "== " << opts_.title << " summary";
  if (distributed_)
    os << ", node " << node << " (" << to_string(roles) << ")";
  os << " ==\n";
  bool collector_only = distributed_ && !roles.has(role::learner)
    && !roles.has(role::evaluator);
  if (!collector_only) {
    if (evals.empty() && distributed_)
      os << "evaluations:       on the evaluator node (its summary)\n";
    else
      os << "solved:            "
         << (j["solved"].get<bool>() ? "yes, after "
                 + fixed(j["solve_seconds"].get<double>(), 2) + " s and "
                 + std::to_string(j["solve_env_steps"].get<std::int64_t>())
                 + " env steps"
                                     : std::string{"no"})
         << "\nbest / last eval:  " << fixed(best_) << " / "
         << fixed(evals.empty() ? std::nan("") : evals.back().mean) << " ("
         << evals.size() << " evaluations)\n";
  }
  os << "stop reason:       " << j["stop_reason"].get<std::string>() << "\n"
     << "env steps:         " << j["env_steps"].get<std::int64_t>() << " ("
     << fixed(j["env_steps_per_s"].is_number()
                ? j["env_steps_per_s"].get<double>()
                : 0.0,
              0)
     << "/s)\n";
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& [id, extra] : extra_)
      os << extra.second;
  }
  if (j.contains("cpu_seconds")) {
    // Shares of wall time x cores, in the order a reader compares them.
    auto& c = j["cpu_seconds"];
    auto cores = c["cores"].get<unsigned>();
    auto total = std::max(result.seconds, 1e-9) * cores;
    os << "cpu:               " << cores << " cores x "
       << fixed(result.seconds, 1) << " s:";
    const char* sep = " ";
    for (auto& name : {"env", "inference", "learner", "evaluator",
                       "dice_and_rest", "idle"}) {
      if (!c.contains(name))
        continue;
      os << sep << (std::string{name} == "dice_and_rest" ? "dice" : name) << " "
         << fixed(100.0 * c[name].get<double>() / total, 0) << "%";
      sep = ", ";
    }
    os << "\n";
  }
  os << "wall time:         " << fixed(result.seconds, 2) << " s\n"
     << "outputs in " << opts_.out << "\n";
  std::cout << os.str() << std::flush;
}

} // namespace dice::rl
