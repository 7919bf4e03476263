// The benchmarks' command line through CLI11 (bench_options.hpp). CLI11
// stays in this one file: remote_bench's many sources only see the values.

#include "bench_options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace dice::bench {

option_values::option_values(std::string mode,
                             std::map<std::string, std::string> values)
  : mode_(std::move(mode)), values_(std::move(values)) {
  // nop
}

bool option_values::has(const std::string& name) const {
  return values_.count(name) > 0;
}

std::string option_values::text(const std::string& name,
                                const std::string& fallback) const {
  auto i = values_.find(name);
  return i == values_.end() ? fallback : i->second;
}

long option_values::integer(const std::string& name, long fallback) const {
  // decimal() let through only numbers that fit a long, in decimal.
  auto i = values_.find(name);
  long result = fallback;
  if (i != values_.end() && !CLI::detail::lexical_cast(i->second, result))
    result = fallback;
  return result;
}

double option_values::real(const std::string& name, double fallback) const {
  auto i = values_.find(name);
  double result = fallback;
  if (i != values_.end() && !CLI::detail::lexical_cast(i->second, result))
    result = fallback;
  return result;
}

namespace {

// Whole numbers in decimal that fit a long, as std::stol read them before
// CLI11 (whose conversion takes "010" as octal 8 and saturates one that
// does not fit): an optional '-', digits, leading zeros dropped.
CLI::Validator decimal() {
  return CLI::Validator(
    [](std::string& str) -> std::string {
      auto digits = str.rfind('-', 0) == 0 ? 1u : 0u;
      if (str.size() == digits
          || str.find_first_not_of("0123456789", digits) != std::string::npos)
        return "'" + str + "' is not a whole number";
      errno = 0;
      std::strtol(str.c_str(), nullptr, 10);
      if (errno == ERANGE)
        return "'" + str + "' is out of range";
      auto zeros = std::min(str.find_first_not_of('0', digits), str.size() - 1);
      str.erase(digits, zeros - digits);
      return {};
    },
    "");
}

// Registers `specs` on `app`, in their order. The checks' own descriptions
// are blanked: CLI11 would append them to the value's name in --help.
std::vector<CLI::Option*> add_specs(CLI::App& app,
                                    const std::vector<option_spec>& specs) {
  std::vector<CLI::Option*> result;
  for (auto& spec : specs) {
    auto flag = "--" + spec.name;
    CLI::Option* opt = nullptr;
    switch (spec.kind) {
      case value_kind::flag: opt = app.add_flag(flag, spec.description); break;
      case value_kind::integer:
        opt = app.add_option(flag, spec.description)
                ->type_name("INT")
                ->transform(decimal());
        break;
      case value_kind::real:
        opt = app.add_option(flag, spec.description)
                ->type_name("NUMBER")
                ->check(CLI::Number.description(""));
        break;
      case value_kind::text:
        opt = app.add_option(flag, spec.description)->type_name("TEXT");
        break;
    }
    if (!spec.value_name.empty())
      opt->type_name(spec.value_name);
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeFirst);
    result.push_back(opt);
  }
  return result;
}

int refuse(const std::string& program, const std::string& why) {
  std::fprintf(stderr, "%s: %s (see --help)\n", program.c_str(), why.c_str());
  return 1;
}

} // namespace

parsed_options parse_options(const std::string& program,
                             const std::string& description,
                             const std::vector<option_spec>& specs,
                             const std::vector<mode_spec>& modes, int argc,
                             char** argv) {
  CLI::App app{description, program};
  // Unknown options and stray words come back as extras, so that the
  // refusal names them ("unknown option '--sise'") instead of CLI11's
  // "The following arguments were not expected: --sise 1000".
  app.allow_extras();
  app.get_formatter()->label("SUBCOMMAND", "MODE");
  app.get_formatter()->column_width(24);
  std::vector<CLI::App*> mode_apps;
  std::vector<std::vector<CLI::Option*>> options;
  if (modes.empty()) {
    options.push_back(add_specs(app, specs));
  } else {
    // Every mode takes every option: a parent forwards its own options to
    // the collector processes it starts in another mode.
    for (auto& mode : modes) {
      auto* sub = app.add_subcommand(mode.name, mode.description);
      sub->allow_extras();
      sub->group("Modes");
      mode_apps.push_back(sub);
      options.push_back(add_specs(*sub, specs));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError with exit code 0: exit() prints the help of
    // the mode it follows (or of the program) on stdout.
    if (e.get_exit_code() == 0)
      return app.exit(e);
    return refuse(program, e.what());
  }
  std::size_t selected = 0;
  std::string mode;
  if (!modes.empty()) {
    while (selected < mode_apps.size() && !mode_apps[selected]->parsed())
      ++selected;
    if (selected == mode_apps.size()) {
      auto extras = app.remaining();
      if (!extras.empty() && extras.front().rfind("-", 0) != 0)
        return refuse(program, "unknown mode '" + extras.front() + "'");
      std::string names;
      for (auto& m : modes)
        names += (names.empty() ? "" : ", ") + m.name;
      return refuse(program, "no mode given (one of " + names + ")");
    }
    mode = modes[selected].name;
  }
  if (auto extras = app.remaining(true); !extras.empty()) {
    auto& x = extras.front();
    if (x.rfind("-", 0) == 0)
      return refuse(program,
                    "unknown option '" + x.substr(0, x.find('=')) + "'");
    return refuse(program, "unexpected argument '" + x + "'");
  }
  std::map<std::string, std::string> values;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    auto* opt = options[selected][k];
    if (opt->count() == 0)
      continue;
    if (specs[k].kind == value_kind::flag) {
      if (opt->as<bool>())
        values[specs[k].name] = "1";
    } else {
      values[specs[k].name] = opt->as<std::string>();
    }
  }
  return option_values{std::move(mode), std::move(values)};
}

} // namespace dice::bench
