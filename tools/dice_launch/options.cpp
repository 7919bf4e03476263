// dice-launch's command line, parsed by CLI11: `--key value` and
// `--key=value`, the launcher's options before `--`, the program and its
// arguments after it.
#include "launch.hpp"
#include <CLI/CLI.hpp>

namespace dice_launch {

namespace {

constexpr const char* synopsis = "dice-launch [OPTIONS] -- PROGRAM [ARGS...]";

constexpr const char* footer
  = "Everything after -- is the program and its arguments, passed on\n"
    "verbatim. Each node gets --dice.node-id= --dice.workers=\n"
    "--dice.topology= --dice.host= --dice.port= --dice.listen-fd=3\n"
    "--dice.attach-to= (and --dice.learners= with --learners) ahead of\n"
    "them; node ids are 0..N-1 and ports ephemeral unless given.\n"
    "--dice.secret-file and --openssl.KEY=VALUE (any KEY) go to every\n"
    "node unchanged; with neither, the nodes share a fresh secret.\n"
    "Output lines are prefixed with \"[node ID] \"; the exit code is 0\n"
    "only if every node exited 0.";

// CLI11 2.1 writes "Usage: dice-launch [OPTIONS]"; the program after `--`
// belongs in it.
class formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return std::string{"Usage: "} + synopsis + "\n";
  }
};

// Whole numbers in decimal, as before CLI11 (whose conversion takes "010"
// as octal 8 and "0x10" as 16): digits only, leading zeros dropped.
CLI::Validator decimal() {
  return CLI::Validator(
    [](std::string& str) -> std::string {
      if (str.empty()
          || str.find_first_not_of("0123456789") != std::string::npos)
        return "'" + str + "' is not a whole number";
      str.erase(0, std::min(str.find_first_not_of('0'), str.size() - 1));
      return {};
    },
    "");
}

// "[0, 3600] seconds" as a CLI11 check: Range would let "nan" through.
CLI::Validator seconds() {
  return CLI::Validator(
    [](std::string& str) -> std::string {
      double x = 0;
      if (!CLI::detail::lexical_cast(str, x) || !(x >= 0 && x <= 3600))
        return "'" + str + "' is not 0 to 3600 seconds";
      return {};
    },
    "");
}

// The `--openssl.KEY` options CLI11 left over (`--openssl.KEY=VALUE`, or the
// key and its value as two extras), as "--openssl.KEY=VALUE"; the first
// other leftover ends the launch as an unknown option.
std::vector<std::string> openssl_options(const std::vector<std::string>& xs) {
  static const std::string prefix = "--openssl.";
  std::vector<std::string> result;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    auto& x = xs[k];
    auto name = x.substr(0, x.find('='));
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size())
      usage(x.rfind('-', 0) == 0
              ? "unknown option '" + name + "'"
              : "unexpected argument '" + x + "': the program goes after --");
    if (name.size() < x.size())
      result.push_back(x);
    else if (k + 1 < xs.size() && xs[k + 1].rfind('-', 0) != 0)
      result.push_back(x + "=" + xs[++k]);
    else
      usage(x + ": 1 required VALUE missing");
  }
  return result;
}

} // namespace

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "dice-launch: " << why << " (see --help)\n"
            << "usage: " << synopsis << "\n";
  std::exit(2);
}

options parse(int argc, char** argv) {
  options opts;
  // The program's arguments are not dice-launch's: CLI11 gets only what
  // comes before the first `--` (else it would read a program's --workers
  // or --help as the launcher's own).
  auto own = std::find_if(argv + 1, argv + argc, [](const char* arg) {
    return std::strcmp(arg, "--") == 0;
  });
  if (own != argv + argc)
    opts.command.assign(own + 1, argv + argc);
  CLI::App app{"Starts N local processes of a dice program as the nodes of "
               "one cluster.",
               "dice-launch"};
  app.formatter(std::make_shared<formatter>());
  app.get_formatter()->column_width(32);
  app.footer(footer);
  // Unknown options come back as extras: --openssl.KEY takes any KEY, and
  // a refusal names the option ("unknown option '--wrokers'").
  app.allow_extras();
  // An option given twice counts with its last value, as before CLI11.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app
    .add_option("--workers,--parallel-workers", opts.workers,
                "nodes to start, 1 to 4096")
    ->type_name("N")
    ->transform(decimal())
    ->check(CLI::Range(1u, 4096u).description(""))
    ->capture_default_str();
  app
    .add_option("--learners", opts.learners,
                "nodes 0..L-1 are one learner group")
    ->type_name("L")
    ->transform(decimal())
    ->check(CLI::Range(1u, 65536u).description(""));
  app
    .add_option("--topology", opts.topology,
                "star: attach to node 0; mesh: to all before")
    ->type_name("star|mesh|alone")
    ->check(CLI::IsMember({"star", "mesh", "alone"}).description(""))
    ->capture_default_str();
  // Lists: one value per occurrence, split at commas; occurrences add up.
  app
    .add_option("--ports", opts.ports, "one per node, or the first of a range")
    ->type_name("P[,P...]")
    ->transform(decimal())
    ->delimiter(',')
    ->allow_extra_args(false);
  app
    .add_option("--node-ids", opts.node_ids,
                "one per node, or the first of a range")
    ->type_name("I[,I...]")
    ->transform(decimal())
    ->delimiter(',')
    ->allow_extra_args(false);
  app
    .add_option("--attach-to", opts.attach_to,
                "nodes elsewhere every node attaches to")
    ->type_name("HOST:PORT,...");
  app
    .add_option("--host,--address", opts.host,
                "the address every node listens on")
    ->type_name("ADDR")
    ->capture_default_str();
  app.add_flag("--fork-server", opts.fork_server,
               "fork every node from one instance (DICE_MAIN)");
  app
    .add_option("--max-restarts", opts.max_restarts,
                "restarts per node that failed or died")
    ->type_name("N")
    ->transform(decimal())
    ->check(CLI::Range(0u, 1000000u).description(""))
    ->capture_default_str();
  app
    .add_option("--restart-backoff", opts.restart_backoff,
                "before a first restart; doubles, at most 30 s")
    ->type_name("SECONDS")
    ->check(seconds())
    ->capture_default_str();
  app
    .add_option("--stop-timeout", opts.stop_timeout,
                "after SIGINT/SIGTERM, kill nodes after this")
    ->type_name("SECONDS")
    ->check(seconds())
    ->capture_default_str();
  std::string secret_file;
  auto* secret = app
                   .add_option("--dice.secret-file", secret_file,
                               "the cluster secret, for every node")
                   ->type_name("FILE");
  try {
    app.parse(static_cast<int>(own - argv), argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError with exit code 0: the help goes to stdout.
    if (e.get_exit_code() == 0)
      std::exit(app.exit(e));
    usage(e.what());
  }
  if (secret->count() > 0)
    opts.pass_through.push_back("--dice.secret-file=" + secret_file);
  for (auto& x : openssl_options(app.remaining()))
    opts.pass_through.push_back(x);
  if (opts.command.empty())
    usage("no program given after --");
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
