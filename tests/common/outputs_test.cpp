// What the demos share: JSON files and metrics lines stay valid whatever a
// string holds, and the plot data has one row per evaluation.

#include "outputs.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;

struct scratch {
  fs::path dir;
  explicit scratch(const std::string& name)
    : dir(fs::temp_directory_path()
          / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream f{p};
  std::string line;
  while (std::getline(f, line))
    out.push_back(line);
  return out;
}

TEST(DemoOutputs, AQuoteInAStringStillGivesValidJson) {
  scratch out{"dice_demo_json"};
  auto path = (out.dir / "summary.json").string();
  std::string reason = "error: \"quoted\", back\\slash, new\nline, \x01, \xff";
  demo::write_json(
    path, {{"stop_reason", reason}, {"best_eval", demo::number(std::nan(""))}});
  auto j = demo::read_json(path);
  ASSERT_TRUE(j.contains("stop_reason"));
  // Everything up to the byte that is not UTF-8 survives as written.
  EXPECT_EQ(j["stop_reason"].get<std::string>().rfind(
              "error: \"quoted\", back\\slash, new\nline, \x01, ", 0),
            0u);
  EXPECT_TRUE(j["best_eval"].is_null());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(DemoOutputs, AMissingOrBrokenFileReadsAsAnEmptyObject) {
  scratch out{"dice_demo_broken"};
  EXPECT_TRUE(demo::read_json((out.dir / "nope.json").string()).empty());
  std::ofstream{out.dir / "bad.json"} << "{\"a\": ";
  EXPECT_TRUE(demo::read_json((out.dir / "bad.json").string()).empty());
}

TEST(DemoOutputs, MetricsLinesStartWithTimeNodeRoleAndParse) {
  scratch out{"dice_demo_metrics"};
  auto path = (out.dir / "metrics.jsonl").string();
  {
    demo::metrics_log log;
    ASSERT_FALSE(log.open(path, false));
    log.write(1.5, 3, "collector", {{"env_step", 256}, {"mean", NAN}});
    log.write(2.5, 0, "learner \"x\"", {{"loss", 0.25}});
  }
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  auto a = demo::json::parse(lines[0]);
  EXPECT_EQ(a.begin().key(), "time");
  EXPECT_EQ(a["node"], 3);
  EXPECT_EQ(a["role"], "collector");
  EXPECT_EQ(a["env_step"], 256);
  EXPECT_TRUE(a["mean"].is_null());
  EXPECT_EQ(demo::json::parse(lines[1])["role"], "learner \"x\"");
  // Appending (a resumed run) keeps what was there.
  {
    demo::metrics_log log;
    ASSERT_FALSE(log.open(path, true));
    log.write(3, 1, "evaluator", demo::json::object());
  }
  EXPECT_EQ(lines_of(path).size(), 3u);
}

TEST(DemoOutputs, PlotDataHasOneRowPerEvaluation) {
  scratch out{"dice_demo_plot"};
  std::vector<demo::eval_point> evals{
    demo::make_eval_point({10, 20, 30}, 512, 2, 0.5),
    demo::make_eval_point({500, 480}, 1024, 4, 1.25)};
  EXPECT_DOUBLE_EQ(evals[0].mean, 20);
  EXPECT_DOUBLE_EQ(evals[0].min, 10);
  EXPECT_DOUBLE_EQ(evals[1].max, 500);
  demo::write_eval_plot(out.dir.string(), evals, "t", 475, false, 0);
  auto lines = lines_of(out.dir / "eval_return.dat");
  ASSERT_EQ(lines.size(), 3u); // header + 2
  EXPECT_EQ(lines[2], "1024 1.25 4 490 480 500");
  EXPECT_FALSE(fs::exists(out.dir / "eval_return.png"));
}

TEST(DemoOutputs, AnUncreatableRunDirIsAnError) {
  scratch out{"dice_demo_dir"};
  std::ofstream{out.dir / "file"} << "x";
  EXPECT_TRUE(demo::make_run_dir((out.dir / "file" / "sub").string()));
  EXPECT_FALSE(demo::make_run_dir((out.dir / "a" / "b").string()));
}

} // namespace
