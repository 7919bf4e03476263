// What an RL run writes (dice::rl files and run_outputs): JSON files and
// metrics lines stay valid whatever a string holds, the plot data has one
// row per evaluation, a resumed run reads the counters the last one saved,
// and the summary names the solve, the best evaluation and the stop reason.

#include "dice/rl/outputs.hpp"

#include "support/files.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>

namespace {

namespace fs = std::filesystem;
using namespace dice::rl;
using dice::test::scratch;

std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream f{p};
  std::string line;
  while (std::getline(f, line))
    out.push_back(line);
  return out;
}

outputs_options quiet_in(const fs::path& dir) {
  outputs_options o;
  o.out = dir.string();
  o.title = "test run";
  o.stop_value = 100;
  o.progress = false;
  o.plot = false;
  return o;
}

dice::node_report learner_report(std::int64_t env_step, std::int64_t iter) {
  dice::node_report rep;
  rep.node = 0;
  rep.roles = dice::role_set{dice::role::learner};
  rep.env_step = env_step;
  rep.train_iter = iter;
  rep.iterations = 7;
  rep.stop_reason = "stop_value";
  return rep;
}

TEST(RlFiles, AQuoteInAStringStillGivesValidJson) {
  scratch out{"dice_rl_json"};
  auto path = (out.dir / "summary.json").string();
  std::string reason = "error: \"quoted\", back\\slash, new\nline, \x01, \xff";
  ASSERT_FALSE(write_json(
    path, {{"stop_reason", reason}, {"best_eval", number(std::nan(""))}}));
  auto j = read_json(path);
  ASSERT_TRUE(j.contains("stop_reason"));
  // Everything up to the byte that is not UTF-8 survives as written.
  EXPECT_EQ(j["stop_reason"].get<std::string>().rfind(
              "error: \"quoted\", back\\slash, new\nline, \x01, ", 0),
            0u);
  EXPECT_TRUE(j["best_eval"].is_null());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(RlFiles, AMissingOrBrokenFileReadsAsAnEmptyObject) {
  scratch out{"dice_rl_broken"};
  EXPECT_TRUE(read_json((out.dir / "nope.json").string()).empty());
  std::ofstream{out.dir / "bad.json"} << "{\"a\": ";
  EXPECT_TRUE(read_json((out.dir / "bad.json").string()).empty());
}

TEST(RlFiles, MetricsLinesStartWithTimeNodeRoleAndParse) {
  scratch out{"dice_rl_metrics"};
  auto path = (out.dir / "metrics.jsonl").string();
  {
    metrics_log log;
    ASSERT_FALSE(log.open(path, false));
    log.write(1.5, 3, "collector", {{"env_step", 256}, {"mean", NAN}});
    log.write(2.5, 0, "learner \"x\"", {{"loss", 0.25}});
  }
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  auto a = json::parse(lines[0]);
  EXPECT_EQ(a.begin().key(), "time");
  EXPECT_EQ(a["node"], 3);
  EXPECT_EQ(a["role"], "collector");
  EXPECT_EQ(a["env_step"], 256);
  EXPECT_TRUE(a["mean"].is_null());
  EXPECT_EQ(json::parse(lines[1])["role"], "learner \"x\"");
  // Appending (a resumed run) keeps what was there.
  {
    metrics_log log;
    ASSERT_FALSE(log.open(path, true));
    log.write(3, 1, "evaluator", json::object());
  }
  EXPECT_EQ(lines_of(path).size(), 3u);
}

TEST(RlFiles, PlotDataHasOneRowPerEvaluation) {
  scratch out{"dice_rl_plot"};
  std::vector<eval_point> evals{make_eval_point({10, 20, 30}, 512, 2, 0.5),
                                make_eval_point({500, 480}, 1024, 4, 1.25)};
  EXPECT_DOUBLE_EQ(evals[0].mean, 20);
  EXPECT_DOUBLE_EQ(evals[0].min, 10);
  EXPECT_DOUBLE_EQ(evals[1].max, 500);
  write_eval_plot(out.dir.string(), evals, "t", 475, false, 0);
  auto lines = lines_of(out.dir / "eval_return.dat");
  ASSERT_EQ(lines.size(), 3u); // header + 2
  EXPECT_EQ(lines[2], "1024 1.25 4 490 480 500");
  EXPECT_FALSE(fs::exists(out.dir / "eval_return.png"));
}

TEST(RlFiles, AnUncreatableRunDirIsAnError) {
  scratch out{"dice_rl_dir"};
  std::ofstream{out.dir / "file"} << "x";
  EXPECT_TRUE(make_run_dir((out.dir / "file" / "sub").string()));
  EXPECT_FALSE(make_run_dir((out.dir / "a" / "b").string()));
}

TEST(RunOutputs, AnUnwritableFolderIsAnError) {
  scratch out{"dice_rl_out_bad"};
  std::ofstream{out.dir / "file"} << "x";
  auto made = run_outputs::make(quiet_in(out.dir / "file" / "run"));
  EXPECT_FALSE(made);
}

TEST(RunOutputs, RecordsEvaluationsBestAndFirstSolve) {
  scratch out{"dice_rl_out_evals"};
  auto made = run_outputs::make(quiet_in(out.dir));
  ASSERT_TRUE(made) << dice::render(made.error());
  auto& o = **made;
  EXPECT_TRUE(std::isnan(o.last_eval()));
  auto a = o.record_eval(make_eval_point({50}, 100, 1, 0.1), false);
  EXPECT_TRUE(a.best);
  EXPECT_FALSE(a.first_solve);
  auto b = o.record_eval(make_eval_point({20}, 200, 2, 0.2), false);
  EXPECT_FALSE(b.best);
  auto c = o.record_eval(make_eval_point({120}, 300, 3, 0.3), true);
  EXPECT_TRUE(c.best);
  EXPECT_TRUE(c.first_solve);
  auto d = o.record_eval(make_eval_point({130}, 400, 4, 0.4), true);
  EXPECT_TRUE(d.best);
  EXPECT_FALSE(d.first_solve); // only the first solve counts
  EXPECT_DOUBLE_EQ(o.last_eval(), 130);
  EXPECT_EQ(o.evals().size(), 4u);
  o.metrics(2, "evaluator", {{"eval_return_mean", 130}});
  // The summary of a one-process run: the learner's counters, the solve
  // point, what nodes added.
  o.summarize(0, {{"lag_min", 0}, {"lag_max", 3}}, "policy lag: ...\n");
  dice::run_result r;
  r.reports.push_back(learner_report(1000, 50));
  r.seconds = 2;
  auto j = o.summary(r);
  EXPECT_EQ(j["solved"], true);
  EXPECT_EQ(j["solve_env_steps"], 300);
  EXPECT_DOUBLE_EQ(j["solve_seconds"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(j["best_eval"].get<double>(), 130);
  EXPECT_EQ(j["evaluations"], 4);
  EXPECT_EQ(j["env_steps"], 1000);
  EXPECT_EQ(j["train_iters"], 50);
  EXPECT_EQ(j["learner_iterations"], 7);
  EXPECT_DOUBLE_EQ(j["env_steps_per_s"].get<double>(), 500);
  EXPECT_EQ(j["lag_max"], 3);
  EXPECT_EQ(j["stop_reason"], "stop_value");
  EXPECT_FALSE(j.contains("node")); // one process: no node fields
  o.finish(r);
  auto file = read_json((out.dir / "summary.json").string());
  EXPECT_EQ(file["env_steps"], 1000);
  EXPECT_EQ(lines_of(out.dir / "eval_return.dat").size(), 5u);
  auto metrics = lines_of(out.dir / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_EQ(json::parse(metrics[0])["role"], "evaluator");
}

TEST(RunOutputs, AClusterNodeWritesItsOwnFiles) {
  scratch out{"dice_rl_out_node"};
  auto made = run_outputs::make(quiet_in(out.dir), true, 3);
  ASSERT_TRUE(made);
  (*made)->metrics(3, "collector", {{"env_step", 64}});
  dice::run_result r;
  r.distributed = true;
  dice::node_report rep;
  rep.node = 3;
  rep.roles = dice::role_set{dice::role::collector};
  rep.env_step = 64;
  rep.stop_reason = "finish";
  r.reports.push_back(rep);
  r.seconds = 1;
  (*made)->finish(r);
  EXPECT_TRUE(fs::exists(out.dir / "metrics-3.jsonl"));
  EXPECT_FALSE(fs::exists(out.dir / "metrics.jsonl"));
  auto j = read_json((out.dir / "summary-3.json").string());
  EXPECT_EQ(j["node"], 3);
  EXPECT_EQ(j["roles"], "collector");
  EXPECT_EQ(j["env_steps"], 64);
  // A collector evaluates nothing: no plot data of its own.
  EXPECT_FALSE(fs::exists(out.dir / "eval_return.dat"));
}

TEST(RunOutputs, AResumedRunStartsFromTheSavedCounters) {
  scratch out{"dice_rl_out_resume"};
  ASSERT_FALSE(
    write_json((out.dir / "latest.json").string(),
               {{"env_step", 4096}, {"train_iter", 300}, {"env_episode", 41}}));
  ASSERT_FALSE(
    write_json((out.dir / "best.json").string(), {{"eval_return", 212.5}}));
  std::ofstream{out.dir / "metrics.jsonl"} << "{\"old\": 1}\n";
  auto opts = quiet_in(out.dir);
  // Without --resume the counters are not read and metrics start over.
  {
    auto fresh = run_outputs::make(opts);
    ASSERT_TRUE(fresh);
    EXPECT_FALSE((*fresh)->resumed().resumed);
    EXPECT_EQ((*fresh)->resumed().env_step, 0);
  }
  EXPECT_TRUE(lines_of(out.dir / "metrics.jsonl").empty());
  std::ofstream{out.dir / "metrics.jsonl"} << "{\"old\": 1}\n";
  opts.resume = true;
  auto made = run_outputs::make(opts);
  ASSERT_TRUE(made);
  auto& from = (*made)->resumed();
  EXPECT_TRUE(from.resumed);
  EXPECT_EQ(from.env_step, 4096);
  EXPECT_EQ(from.train_iter, 300);
  EXPECT_EQ(from.env_episode, 41);
  EXPECT_DOUBLE_EQ(from.best, 212.5);
  // best.pt is replaced only by a better model than the one it holds.
  EXPECT_FALSE(
    (*made)->record_eval(make_eval_point({200}, 1, 1, 0), false).best);
  EXPECT_TRUE(
    (*made)->record_eval(make_eval_point({213}, 2, 2, 0), false).best);
  (*made)->metrics(0, "learner", {{"env_step", 5000}});
  EXPECT_EQ(lines_of(out.dir / "metrics.jsonl").size(), 2u);
  // Steps the run resumed from are not counted as its speed.
  dice::run_result r;
  r.reports.push_back(learner_report(5096, 310));
  r.seconds = 10;
  auto j = (*made)->summary(r);
  EXPECT_EQ(j["resumed_env_steps"], 4096);
  EXPECT_DOUBLE_EQ(j["env_steps_per_s"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(j["train_iters_per_s"].get<double>(), 1);
}

} // namespace

namespace {

// Burns about `secs` of this thread's CPU (the result keeps the loop).
double burn(double secs) {
  auto until = dice::rl::thread_cpu_seconds() + secs;
  double x = 1;
  while (dice::rl::thread_cpu_seconds() < until)
    for (int i = 0; i < 1000; ++i)
      x = x * 1.0000001 + 1e-9;
  return x;
}

} // namespace

TEST(CpuTime, ASpanCountsTheThreadsCpuNotTheTimeItWaits) {
  double busy = 0, waiting = 0;
  {
    dice::rl::cpu_span span{busy};
    EXPECT_GT(burn(0.05), 0);
  }
  {
    // A wait that ends by its deadline: no CPU of this thread.
    dice::rl::cpu_span span{waiting};
    std::mutex mtx;
    std::condition_variable cv;
    std::unique_lock<std::mutex> guard{mtx};
    cv.wait_for(guard, std::chrono::milliseconds{100}, [] {
      return false;
    });
  }
  EXPECT_GE(busy, 0.05);
  EXPECT_LT(waiting, 0.02);
  EXPECT_GE(dice::rl::process_cpu_seconds(), busy);
}

TEST(RunOutputs, TheSummarySetsMeasuredCpuAgainstTheProcessAndWallTime) {
  scratch out{"dice_rl_out_cpu"};
  auto made = run_outputs::make(quiet_in(out.dir));
  ASSERT_TRUE(made);
  auto& o = **made;
  double env = 0;
  {
    dice::rl::cpu_span span{env};
    burn(0.05);
  }
  o.add_cpu("env", env);
  o.add_cpu("learner", 0.01);
  o.add_cpu("learner", 0.01);
  dice::run_result r;
  r.reports.push_back(learner_report(1000, 50));
  r.seconds = 10;
  auto j = o.summary(r);
  ASSERT_TRUE(j.contains("cpu_seconds")) << j.dump();
  auto& c = j["cpu_seconds"];
  EXPECT_DOUBLE_EQ(c["env"].get<double>(), env);
  EXPECT_DOUBLE_EQ(c["learner"].get<double>(), 0.02);
  // What the process used besides the spans is dice's (here: the test's),
  // what it did not use of 10 s x cores is idle.
  auto process = c["process"].get<double>();
  EXPECT_GE(process, env);
  EXPECT_NEAR(c["dice_and_rest"].get<double>(),
              std::max(0.0, process - env - 0.02), 1e-9);
  auto cores = c["cores"].get<double>();
  EXPECT_NEAR(c["idle"].get<double>(), 10 * cores - process, 1e-9);
}

TEST(RunOutputs, WithoutMeasuredCpuTheSummaryHasNoCpuFields) {
  scratch out{"dice_rl_out_nocpu"};
  auto made = run_outputs::make(quiet_in(out.dir));
  ASSERT_TRUE(made);
  dice::run_result r;
  r.reports.push_back(learner_report(10, 1));
  r.seconds = 1;
  EXPECT_FALSE((*made)->summary(r).contains("cpu_seconds"));
}
