#include "evals.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <exception>
#include <iostream>
#include <limits>

namespace demo {

void report_eval(std::uint32_t node, const eval_point& pt, bool best,
                 bool solved, const std::string& out,
                 const std::function<void(const std::string&)>& save_best) {
  dice::log::write(
    best || solved ? dice::log::level::info : dice::log::level::debug, node,
    "eval at train_iter " + std::to_string(pt.train_iter) + ", env_step "
      + std::to_string(pt.env_step) + ": return " + fixed(pt.mean) + " (min "
      + fixed(pt.min, 0) + ", max " + fixed(pt.max, 0) + ")"
      + (best ? " new best" : ""));
  if (!best)
    return;
  try {
    save_best(path_in(out, "best.pt"));
    write_json(path_in(out, "best.json"),
               {{"eval_return", pt.mean},
                {"env_step", pt.env_step},
                {"train_iter", pt.train_iter}});
  } catch (const std::exception& e) {
    dice::log::error(node, std::string{"cannot write best.pt: "} + e.what());
  }
}

void stop_when_solved(dice::node_services& svc, std::uint32_t node, bool solved,
                      double stop_value, double seconds) {
  if (!solved || svc.finished())
    return;
  dice::log::info(node,
                  "stop value " + fixed(stop_value) + " reached after "
                    + fixed(seconds, 2) + " s");
  svc.request_finish("stop_value");
}

double take_mean(std::vector<double>& returns) {
  if (returns.empty())
    return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (auto r : returns)
    sum += r;
  auto mean = sum / static_cast<double>(returns.size());
  returns.clear();
  return mean;
}

int print_eval_only(const caf::expected<std::vector<double>>& returns) {
  if (!returns) {
    std::cerr << dice::render(returns.error()) << '\n';
    return 1;
  }
  double sum = 0;
  for (std::size_t i = 0; i < returns->size(); ++i) {
    std::cout << "episode " << i << ": return " << (*returns)[i] << '\n';
    sum += (*returns)[i];
  }
  std::cout << "mean return over " << returns->size()
            << " episodes: " << sum / returns->size() << '\n';
  return 0;
}

} // namespace demo
