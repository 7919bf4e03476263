// normalize_cli: `--key value` becomes `--key=value` for options that take a
// value, so CAF 0.17's parser (which reads only the latter) takes both.

#include "dice/core/errc.hpp"
#include "dice/runtime/node.hpp"
#include "runtime/cli.hpp"

#include "caf/actor_system_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using strings = std::vector<std::string>;

struct config : dice::node_system_config {
  std::int64_t steps = 1;
  std::string out = "runs";
  bool quiet = false;
  config() {
    opt_group{custom_options_, "global"}
      .add(steps, "steps,s", "iterations")
      .add(out, "out", "output folder")
      .add(quiet, "quiet", "no progress line");
  }
  const caf::config_option_set& options() const {
    return custom_options_;
  }
};

strings normalized(const strings& args) {
  config cfg;
  auto result = dice::normalize_cli(cfg.options(), args);
  if (!result)
    return {"error: " + dice::render(result.error())};
  return *result;
}

} // namespace

TEST(Cli, SpaceSeparatedValuesAreJoinedAndFlagsKept) {
  EXPECT_EQ(normalized({"--steps", "10", "--quiet", "--out", "a b",
                        "--dice.deterministic", "--dice.node-id", "-1"}),
            (strings{"--steps=10", "--quiet", "--out=a b",
                     "--dice.deterministic", "--dice.node-id=-1"}));
}

TEST(Cli, EqualsFormShortOptionsAndTheRestStayAsTheyAre) {
  EXPECT_EQ(normalized({"--steps=3", "-s", "4", "--help", "-h", "file", "--",
                        "--anything", "x"}),
            (strings{"--steps=3", "-s", "4", "--help", "-h", "file", "--",
                     "--anything", "x"}));
}

TEST(Cli, UnknownOptionsAreNamed) {
  EXPECT_EQ(normalized({"--steps", "2", "--stepz", "10"}),
            (strings{"error: invalid_config: unknown option '--stepz' (see "
                     "--help)"}));
  EXPECT_EQ(normalized({"--dice.nodeid=3"}),
            (strings{"error: invalid_config: unknown option '--dice.nodeid' "
                     "(see --help)"}));
  EXPECT_EQ(normalized({"-x"}),
            (strings{"error: invalid_config: unknown option '-x' (see "
                     "--help)"}));
}

TEST(Cli, OptionWithoutItsValueIsNamed) {
  EXPECT_EQ(normalized({"--quiet", "--out"}),
            (strings{"error: invalid_config: option '--out' needs a value "
                     "(see --help)"}));
}

TEST(Cli, CafParsesWhatComesOut) {
  // Before: CAF alone refused "--steps 10" (parser_error missing_argument).
  config raw;
  EXPECT_TRUE(raw.parse(strings{"--steps", "10"}));
  config cfg;
  auto args = dice::normalize_cli(
    cfg.options(), {"--steps", "10", "--quiet", "--dice.workers", "4"});
  ASSERT_TRUE(args);
  ASSERT_FALSE(cfg.parse(*args)) << cfg.render(cfg.parse(*args));
  EXPECT_EQ(cfg.steps, 10);
  EXPECT_TRUE(cfg.quiet);
  EXPECT_EQ(cfg.workers, 4u);
}
