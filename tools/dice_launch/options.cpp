// dice-launch's command line.
#include "launch.hpp"

namespace dice_launch {

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "dice-launch: " << why << "\n"
            << "usage: dice-launch --workers N [--learners L] "
               "[--topology star|mesh|alone] "
               "[--ports P[,P...]] [--node-ids I[,I...]] "
               "[--attach-to host:port,...] [--host ADDR] "
               "[--fork-server] [--max-restarts N] "
               "[--restart-backoff SECONDS] [--stop-timeout SECONDS] "
               "[--dice.secret-file=FILE] "
               "[--openssl.KEY=VALUE ...] -- PROGRAM [ARGS...]\n";
  std::exit(2);
}

namespace {

std::vector<std::string> split(const std::string& str) {
  std::vector<std::string> result;
  std::size_t pos = 0;
  while (pos <= str.size()) {
    auto next = str.find(',', pos);
    if (next == std::string::npos)
      next = str.size();
    if (next > pos)
      result.push_back(str.substr(pos, next - pos));
    pos = next + 1;
  }
  return result;
}

unsigned long to_num(const std::string& str, unsigned long max,
                     const char* what) {
  char* end = nullptr;
  errno = 0;
  auto x = std::strtoul(str.c_str(), &end, 10);
  if (str.empty() || *end != '\0' || errno != 0 || x > max)
    usage(std::string{"bad "} + what + ": '" + str + "'");
  return x;
}

} // namespace

options parse(int argc, char** argv) {
  options opts;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    std::string arg = argv[i];
    auto eq = arg.find('=');
    if (eq != std::string::npos)
      return arg.substr(eq + 1);
    if (i + 1 >= argc)
      usage("missing value for " + flag);
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    auto flag = arg.substr(0, arg.find('='));
    if (arg == "--") {
      ++i;
      break;
    } else if (flag == "--workers" || flag == "--parallel-workers") {
      opts.workers = static_cast<std::uint32_t>(
        to_num(value(flag), 4096, "--workers"));
    } else if (flag == "--learners") {
      opts.learners = static_cast<std::uint32_t>(
        to_num(value(flag), 65536, "--learners"));
      if (opts.learners == 0)
        usage("--learners must be at least 1");
    } else if (flag == "--topology") {
      opts.topology = value(flag);
      if (opts.topology != "star" && opts.topology != "mesh"
          && opts.topology != "alone")
        usage("unknown topology '" + opts.topology + "'");
    } else if (flag == "--ports") {
      for (auto& p : split(value(flag)))
        opts.ports.push_back(
          static_cast<std::uint16_t>(to_num(p, 65535, "--ports")));
    } else if (flag == "--node-ids") {
      for (auto& p : split(value(flag)))
        opts.node_ids.push_back(
          static_cast<std::uint32_t>(to_num(p, 0xFFFFFFFFul, "--node-ids")));
    } else if (flag == "--attach-to") {
      opts.attach_to = value(flag);
    } else if (flag == "--host" || flag == "--address") {
      opts.host = value(flag);
    } else if (flag == "--fork-server") {
      opts.fork_server = true;
    } else if (flag == "--max-restarts") {
      opts.max_restarts = static_cast<std::uint32_t>(
        to_num(value(flag), 1000000, "--max-restarts"));
    } else if (flag == "--restart-backoff" || flag == "--stop-timeout") {
      auto str = value(flag);
      char* end = nullptr;
      auto x = std::strtod(str.c_str(), &end);
      if (str.empty() || *end != '\0' || !(x >= 0) || x > 3600)
        usage("bad " + flag + ": '" + str + "' (seconds, 0 to 3600)");
      (flag == "--stop-timeout" ? opts.stop_timeout : opts.restart_backoff) = x;
    } else if (flag == "--dice.secret-file"
               || flag.rfind("--openssl.", 0) == 0) {
      opts.pass_through.push_back(flag + "=" + value(flag));
    } else if (arg == "-h" || arg == "--help") {
      usage("help");
    } else {
      usage("unknown option '" + arg + "'");
    }
  }
  for (; i < argc; ++i)
    opts.command.emplace_back(argv[i]);
  if (opts.command.empty())
    usage("no program given after --");
  if (opts.workers == 0)
    usage("--workers must be at least 1");
  if (opts.learners > opts.workers)
    usage("--learners must not exceed --workers");
  // DI-engine: one id k means k..k+n-1; a list is used as is.
  if (opts.node_ids.size() == 1)
    for (std::uint32_t k = 1; k < opts.workers; ++k)
      opts.node_ids.push_back(opts.node_ids[0] + k);
  if (opts.node_ids.empty())
    for (std::uint32_t k = 0; k < opts.workers; ++k)
      opts.node_ids.push_back(k);
  if (opts.node_ids.size() != opts.workers)
    usage("--node-ids needs one id or one per worker");
  // One port p means p..p+n-1, all of them ports.
  if (opts.ports.size() == 1 && opts.ports[0] != 0
      && opts.ports[0] + (opts.workers - 1ul) > 65535)
    usage("--ports " + std::to_string(opts.ports[0]) + " with "
          + std::to_string(opts.workers) + " workers needs ports up to "
          + std::to_string(opts.ports[0] + (opts.workers - 1ul)) + " > 65535");
  if (opts.ports.size() == 1)
    for (std::uint32_t k = 1; k < opts.workers; ++k)
      opts.ports.push_back(static_cast<std::uint16_t>(opts.ports[0] + k));
  if (!opts.ports.empty() && opts.ports.size() != opts.workers)
    usage("--ports needs one port or one per worker");
  return opts;
}

} // namespace dice_launch
