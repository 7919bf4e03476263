// dice::log: node ids in every line, lazy formatting, and a user sink that
// is called without a dice lock held.

#include "dice/logging/log.hpp"
#include "dice/logging/sampler.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

/// Counts how often fmt formats it.
struct counted {
  int* calls;
};

/// Routes the default logger's lines into a string while a test runs.
class logger_capture {
 public:
  logger_capture()
    : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(os_)) {
    sink_->set_pattern("%l %v");
    dice::log::spdlog_logger()->sinks().push_back(sink_);
  }

  ~logger_capture() {
    auto& sinks = dice::log::spdlog_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }

  std::string text() const {
    return os_.str();
  }

 private:
  std::ostringstream os_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

/// Restores the threshold and sink a test changed.
class Log : public ::testing::Test {
 protected:
  ~Log() override {
    dice::log::set_threshold(dice::log::level::info);
    dice::log::set_sink(nullptr);
  }
};

} // namespace

template <>
struct fmt::formatter<counted> : fmt::formatter<int> {
  template <class Context>
  auto format(const counted& x, Context& ctx) const {
    ++*x.calls;
    return fmt::formatter<int>::format(*x.calls, ctx);
  }
};

TEST_F(Log, EveryDefaultLineNamesItsNode) {
  logger_capture cap;
  dice::log::info(7, "hello");
  dice::log::warning(12, "value {} of {}", 3, "x");
  EXPECT_NE(cap.text().find("info [node 7] hello\n"), std::string::npos)
    << cap.text();
  EXPECT_NE(cap.text().find("warning [node 12] value 3 of x\n"),
            std::string::npos)
    << cap.text();
}

TEST_F(Log, FilteredOutDebugLinesAreNotFormatted) {
  int calls = 0;
  dice::log::debug(1, "model {}", counted{&calls});
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(dice::log::enabled(dice::log::level::debug));
  dice::log::set_threshold(dice::log::level::debug);
  logger_capture cap;
  dice::log::debug(1, "model {}", counted{&calls});
  EXPECT_EQ(calls, 1);
  EXPECT_NE(cap.text().find("debug [node 1] model 1"), std::string::npos)
    << cap.text();
}

TEST_F(Log, UserSinkGetsLevelNodeAndTextInsteadOfTheLogger) {
  logger_capture cap;
  std::vector<std::string> seen;
  auto prev = dice::log::set_sink(
    [&](dice::log::level lvl, std::uint32_t node, const std::string& msg) {
      seen.push_back(std::string{dice::log::to_string(lvl)} + " "
                     + std::to_string(node) + " " + msg);
    });
  dice::log::error(3, "bad {}", "input");
  dice::log::debug(3, "not written");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "error 3 bad input");
  EXPECT_EQ(cap.text(), "");
  // The previous (default) sink is callable: a program can chain to it.
  ASSERT_TRUE(prev);
  prev(dice::log::level::info, 4, "chained");
  EXPECT_NE(cap.text().find("info [node 4] chained"), std::string::npos);
}

TEST_F(Log, TwoThreadsAreInsideTheUserSinkAtOnce) {
  // Before: one global mutex was held while the sink ran, so the second
  // line waited for the first to leave the sink (this test timed out).
  std::mutex mtx;
  std::condition_variable cv;
  bool first_inside = false;
  bool second_arrived = false;
  bool second_seen_by_first = false;
  dice::log::set_sink(
    [&](dice::log::level, std::uint32_t, const std::string& msg) {
      std::unique_lock<std::mutex> guard{mtx};
      if (msg == "first") {
        first_inside = true;
        cv.notify_all();
        second_seen_by_first = cv.wait_for(guard, 10s, [&] {
          return second_arrived;
        });
      } else {
        second_arrived = true;
        cv.notify_all();
      }
    });
  std::thread a{[] {
    dice::log::info(1, "first");
  }};
  {
    std::unique_lock<std::mutex> guard{mtx};
    EXPECT_TRUE(cv.wait_for(guard, 10s, [&] {
      return first_inside;
    }));
  }
  std::thread b{[] {
    dice::log::info(2, "second");
  }};
  a.join();
  b.join();
  EXPECT_TRUE(second_seen_by_first);
}

TEST(LogSampler, LogsTheFirstAndEvery1024thPerKey) {
  dice::log::sampler s;
  std::vector<std::uint64_t> logged;
  for (int i = 0; i < 2100; ++i)
    if (auto n = s.next("bind|10.0.0.1"))
      logged.push_back(n);
  EXPECT_EQ(logged, (std::vector<std::uint64_t>{1, 1025, 2049}));
  // Another peer, or another kind from the same peer, counts apart.
  EXPECT_EQ(s.next("bind|10.0.0.2"), 1u);
  EXPECT_EQ(s.next("proof|10.0.0.1"), 1u);
  EXPECT_EQ(dice::log::sampled_note(1), "");
  EXPECT_EQ(dice::log::sampled_note(1025),
            " (1025 such; every 1024th is logged)");
}

TEST(LogSampler, ManyKeysShareOneCountBeyondTheCap) {
  dice::log::sampler s{1024, 3};
  EXPECT_EQ(s.next("a"), 1u);
  EXPECT_EQ(s.next("b"), 1u);
  EXPECT_EQ(s.next("c"), 1u);
  // A flood of new source addresses: the 4th key on shares one count.
  EXPECT_EQ(s.next("d"), 1u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(s.next("e" + std::to_string(i)), 0u);
}

TEST(LogSampler, HostOfAnAddressDropsThePort) {
  EXPECT_EQ(dice::log::host_of("127.0.0.1:4242"), "127.0.0.1");
  EXPECT_EQ(dice::log::host_of("[::1]:4242"), "[::1]");
  EXPECT_EQ(dice::log::host_of("::1"), "::1");
  EXPECT_EQ(dice::log::host_of("node-a"), "node-a");
}
