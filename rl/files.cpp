#include "dice/rl/files.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

namespace dice::rl {

std::string path_in(const std::string& dir, const std::string& name) {
  return (std::filesystem::path{dir} / name).string();
}

caf::error make_run_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return dice::make_error(dice::errc::invalid_config,
                            "cannot create " + dir + ": " + ec.message());
  return caf::none;
}

std::string fixed(double x, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << x;
  return os.str();
}

json number(double x) {
  if (std::isfinite(x))
    return x;
  return nullptr;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

caf::error write_json(const std::string& path, const json& j) {
  auto tmp = path + ".tmp";
  {
    std::ofstream f{tmp, std::ios::trunc};
    f << dump(j) << '\n';
    if (!f)
      return dice::make_error(dice::errc::invalid_config,
                              "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return dice::make_error(dice::errc::invalid_config,
                            "cannot rename " + tmp + " to " + path);
  return caf::none;
}

json read_json(const std::string& path) {
  std::ifstream f{path};
  if (!f)
    return json::object();
  auto j = json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return json::object();
  return j;
}

caf::error metrics_log::open(const std::string& path, bool append) {
  std::lock_guard<std::mutex> guard{mtx_};
  file_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!file_)
    return dice::make_error(dice::errc::invalid_config, "cannot write " + path);
  return caf::none;
}

void metrics_log::write(double seconds, std::uint32_t node,
                        const std::string& role, const json& fields) {
  json line{{"time", seconds}, {"node", node}, {"role", role}};
  line.update(fields);
  auto text = dump(line);
  std::lock_guard<std::mutex> guard{mtx_};
  if (file_)
    file_ << text << '\n' << std::flush;
}

eval_point make_eval_point(const std::vector<double>& returns,
                           std::int64_t env_step, std::int64_t train_iter,
                           double seconds) {
  eval_point pt;
  pt.env_step = env_step;
  pt.train_iter = train_iter;
  pt.seconds = seconds;
  if (returns.empty()) {
    pt.mean = pt.min = pt.max = std::numeric_limits<double>::quiet_NaN();
    return pt;
  }
  pt.min = std::numeric_limits<double>::infinity();
  pt.max = -pt.min;
  for (auto r : returns) {
    pt.mean += r;
    pt.min = std::min(pt.min, r);
    pt.max = std::max(pt.max, r);
  }
  pt.mean /= static_cast<double>(returns.size());
  return pt;
}

void write_eval_plot(const std::string& out,
                     const std::vector<eval_point>& evals,
                     const std::string& title, double stop_value, bool png,
                     std::uint32_t node) {
  auto dat = path_in(out, "eval_return.dat");
  {
    std::ofstream f{dat};
    f << "# env_step seconds train_iter mean min max\n";
    for (auto& e : evals)
      f << e.env_step << ' ' << e.seconds << ' ' << e.train_iter << ' '
        << e.mean << ' ' << e.min << ' ' << e.max << '\n';
  }
  if (!png || evals.empty())
    return;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    dice::log::warning(
      node, "gnuplot not found: skipped eval_return.png (data in " + dat + ")");
    return;
  }
  auto file = path_in(out, "eval_return.png");
  // "e": the pipe is close-on-exec, so no other process this one starts
  // meanwhile (a node, a loader's helper) inherits gnuplot's input.
  auto* gp = popen("gnuplot", "we");
  if (gp == nullptr) {
    dice::log::warning(node, "cannot start gnuplot: no plot");
    return;
  }
  // gnuplot strings in single quotes: a quote is written twice.
  auto quoted = [](std::string s) {
    std::string r = "'";
    for (auto c : s)
      r += c == '\'' ? std::string{"''"} : std::string(1, c);
    return r + "'";
  };
  std::ostringstream s;
  s << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
       "{ set terminal pngcairo size 1200,450 } "
       "else { set terminal png size 1200,450 }\n"
    << "set output " << quoted(file) << "\n"
    << "set multiplot layout 1,2 title "
    << quoted(title + ": greedy eval return (mean, min-max)") << "\n"
    << "set grid\nset key bottom right\n";
  for (auto [column, label] :
       {std::pair{1, "env steps"}, std::pair{2, "wall time (s)"}}) {
    // Env steps read as 200k, 1M (gnuplot's %s%c) instead of 1x10^6.
    s << "set xlabel '" << label << "'\nset ylabel 'return'\n"
      << (column == 1 ? "set format x '%.0s%c'\n" : "set format x '%g'\n")
      << "plot " << quoted(dat) << " using " << column
      << ":5:6 with filledcurves lc rgb '#cce0ff' title 'min-max', '' using "
      << column << ":4 with linespoints pt 7 ps 0.5 title 'mean'";
    // A run without a stop value (--stop-value left at 1e18) draws none:
    // the line would set the scale.
    if (std::isfinite(stop_value) && std::abs(stop_value) < 1e15)
      s << ", " << stop_value << " dt 2 lc rgb 'red' title 'stop value'";
    s << "\n";
  }
  s << "unset multiplot\n";
  auto script = s.str();
  std::fwrite(script.data(), 1, script.size(), gp);
  if (pclose(gp) != 0)
    dice::log::warning(node, "gnuplot failed: check " + file);
  else
    dice::log::info(node, "wrote " + file);
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

struct progress_line::shared {
  std::mutex mtx;
  std::string text;
  dice::log::sink prev;
};

progress_line::progress_line(bool enabled)
  : enabled_(enabled), tty_(enabled && isatty(STDERR_FILENO) != 0),
    shared_(std::make_shared<shared>()) {
  if (!tty_)
    return;
  // On a terminal the line is redrawn in place: log lines clear it first
  // and redraw it after.
  shared_->prev = dice::log::set_sink(nullptr);
  std::weak_ptr<shared> weak = shared_;
  auto prev = shared_->prev;
  dice::log::set_sink([weak, prev](dice::log::level lvl, std::uint32_t node,
                                   const std::string& msg) {
    auto sh = weak.lock();
    if (sh)
      std::fprintf(stderr, "\r\033[K");
    if (prev)
      prev(lvl, node, msg);
    if (sh) {
      std::lock_guard<std::mutex> guard{sh->mtx};
      std::fprintf(stderr, "%s", sh->text.c_str());
    }
  });
}

progress_line::~progress_line() {
  if (!tty_)
    return;
  std::fprintf(stderr, "\n");
  dice::log::set_sink(shared_->prev);
}

void progress_line::show(const std::string& text) {
  if (!enabled_)
    return;
  std::lock_guard<std::mutex> guard{shared_->mtx};
  shared_->text = text;
  if (tty_)
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
  else
    std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

} // namespace dice::rl
