// In-process figures of the snapshot path, each next to its baseline in the
// same run (bench/run turns them into ratios): memcpy of the same bytes,
// snapshot <-> LibTorch module, wire encode/decode, shared memory, checksum,
// local fan-out to 1/4/16 receivers.

#include "dice/actors/router.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/storage/storage.hpp"
#include "dice/torch/model.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

// Sizes: 1 MB, 6.8 MB (DI-engine's measured model), 100 MB.
void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {1'000'000LL, 6'800'000LL, 100'000'000LL})
    b->Arg(n);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

struct blob : torch::nn::Module {
  explicit blob(std::int64_t bytes) {
    w = register_parameter("w", torch::rand({bytes / 4}));
  }
  torch::Tensor w;
};

void BM_memcpy(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(n, 1);
  std::vector<char> dst(n, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_memcpy)->Apply(sizes);

// memcpy into a freshly allocated buffer: what any copy that produces a new
// snapshot pays (page faults included).
void BM_memcpy_fresh(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(n, 1);
  for (auto _ : state) {
    std::unique_ptr<char[]> dst{new char[n]};
    std::memcpy(dst.get(), src.data(), n);
    benchmark::DoNotOptimize(dst.get());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_memcpy_fresh)->Apply(sizes);

void BM_serialize(benchmark::State& state) {
  blob m{state.range(0)};
  for (auto _ : state) {
    auto x = dice::to_snapshot(m);
    benchmark::DoNotOptimize(x->data.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_serialize)->Apply(sizes);

void BM_deserialize(benchmark::State& state) {
  blob m{state.range(0)};
  auto x = dice::to_snapshot(m);
  for (auto _ : state) {
    auto err = dice::load_snapshot(m, *x);
    benchmark::DoNotOptimize(err);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_deserialize)->Apply(sizes);

void BM_wire_encode(benchmark::State& state) {
  blob m{state.range(0)};
  auto x = dice::to_snapshot(m);
  std::vector<char> buf;
  for (auto _ : state) {
    buf.clear();
    caf::binary_serializer sink{nullptr, buf};
    auto err = sink(*x);
    benchmark::DoNotOptimize(err);
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_wire_encode)->Apply(sizes);

void BM_wire_decode(benchmark::State& state) {
  blob m{state.range(0)};
  auto x = dice::to_snapshot(m);
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  if (sink(*x))
    state.SkipWithError("encode failed");
  for (auto _ : state) {
    dice::model_snapshot y;
    caf::binary_deserializer src{nullptr, buf};
    auto err = src(y);
    benchmark::DoNotOptimize(err);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_wire_decode)->Apply(sizes);

void BM_checksum(benchmark::State& state) {
  std::vector<char> src(static_cast<std::size_t>(state.range(0)), 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(dice::checksum64(src.data(), src.size()));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_checksum)->Apply(sizes);

// What a receiver pays per chunk: copy into the reassembly buffer and hash
// in one pass (copy_checksum64), against BM_memcpy.
void BM_copy_checksum(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(n, 1);
  std::vector<char> dst(n, 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(dice::copy_checksum64(dst.data(), src.data(), n));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_copy_checksum)->Apply(sizes);

// Same-host shared memory: the sender stores, the receiver loads (two
// copies, like a sender's memcpy into and a receiver's out of a buffer).
void BM_shm_snapshot(benchmark::State& state) {
  blob m{state.range(0)};
  auto x = dice::to_snapshot(m);
  dice::storage_options opts;
  opts.kind = dice::storage_kind::shm;
  for (auto _ : state) {
    auto ref = dice::store(opts, *x);
    auto y = dice::load_snapshot(*ref);
    benchmark::DoNotOptimize(y->data.data());
    state.PauseTiming();
    dice::remove_storage(*ref);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_shm_snapshot)->Apply(sizes);

// Baseline of the shm figure: the same two copies with memcpy.
void BM_memcpy_twice(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(n, 1);
  std::vector<char> mid(n, 0);
  for (auto _ : state) {
    std::memcpy(mid.data(), src.data(), n);
    std::unique_ptr<char[]> dst{new char[n]};
    std::memcpy(dst.get(), mid.data(), n);
    benchmark::DoNotOptimize(dst.get());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_memcpy_twice)->Apply(sizes);

long rss_kb() {
  std::ifstream in{"/proc/self/statm"};
  long pages = 0;
  long resident = 0;
  in >> pages >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

// The hub of the floor row: what CAF alone costs to hand one message to N
// actors, each delivery the router's own call (`unsafe_send_as`), with no
// topic, peer or retention logic.
caf::behavior plain_hub(caf::event_based_actor* self,
                        std::shared_ptr<std::vector<caf::actor>> members) {
  return {[=](dice::publish_atom, const std::string&, std::uint32_t,
              const caf::message& msg) {
    for (auto& m : *members)
      caf::unsafe_send_as(self, m, msg);
  }};
}

// A 6.8 MB snapshot published to N local receivers that keep it: time per
// round and memory it adds (both should not grow with N). `plain` swaps the
// router for plain_hub: the floor CAF's scheduler sets for the same rounds.
void fanout(benchmark::State& state, bool plain) {
  caf::actor_system_config cfg;
  dice::add_message_types(cfg);
  // CAF's workers as every RL node runs them (dice::rl::run_config): an idle
  // worker waits on its condition variable, which a message wakes, instead
  // of polling 500 times 50 us apart. With the polling, a round (~110 us)
  // was mostly those sleeps, which hid what each receiver costs; without,
  // a round is ~35 us. DICE_BENCH_IDLE_POLL=1 keeps CAF's defaults.
  if (std::getenv("DICE_BENCH_IDLE_POLL") == nullptr) {
    cfg.set("work-stealing.aggressive-poll-attempts", 0);
    cfg.set("work-stealing.moderate-poll-attempts", 0);
  }
  caf::actor_system sys{cfg};
  auto n = state.range(0);
  caf::scoped_actor self{sys};
  auto members = std::make_shared<std::vector<caf::actor>>();
  // The member that takes the round's last delivery says done: one wake-up
  // of the timing thread a round whatever N (N acks to one blocking thread
  // timed the harness: each woke it once).
  auto left = std::make_shared<std::atomic<std::int64_t>>(0);
  for (std::int64_t i = 0; i < n; ++i)
    members->push_back(
      sys.spawn([self_ = caf::actor{self},
                 left](caf::event_based_actor* me) -> caf::behavior {
        auto kept = std::make_shared<dice::model_snapshot>();
        return {[=](const std::string&, const dice::model_snapshot& x) {
          *kept = x; // holds the snapshot like a model cache
          if (left->fetch_sub(1) == 1)
            me->send(self_, dice::done_atom::value);
        }};
      }));
  caf::actor hub;
  if (plain) {
    hub = sys.spawn(plain_hub, members);
  } else {
    dice::router_config bc;
    hub = caf::actor_cast<caf::actor>(dice::spawn_router(sys, bc));
    for (std::int64_t i = 0; i < n; ++i)
      self->send(hub, dice::join_atom::value, std::uint32_t(10 + i),
                 dice::role_set{}, (*members)[i],
                 std::vector<std::string>{"model"});
    for (std::int64_t i = 0; i < n; ++i)
      self->receive([](const std::vector<dice::finish>&) {});
  }
  blob m{6'800'000};
  auto x = dice::to_snapshot(m);
  // Memory is read around the whole loop, not each round: two reads of
  // /proc a round were a third of the round's time, the same for every N,
  // which shrank the ratios. What N receivers hold stays held after it.
  auto before = rss_kb();
  for (auto _ : state) {
    left->store(n);
    self->send(hub, dice::publish_atom::value, std::string{"model"},
               std::uint32_t{1}, caf::make_message(std::string{"model"}, *x));
    self->receive([](dice::done_atom) {});
  }
  state.counters["rss_added_kb"] = static_cast<double>(rss_kb() - before);
  for (auto& mbr : *members)
    self->send_exit(mbr, caf::exit_reason::user_shutdown);
  self->send_exit(hub, caf::exit_reason::user_shutdown);
}

void BM_fanout(benchmark::State& state) {
  fanout(state, false);
}

void BM_fanout_plain_caf(benchmark::State& state) {
  fanout(state, true);
}

// Rounds take ~0.04 ms, so one scheduler hiccup on a busy 2-core machine
// moves a single run by 30%: bench/run reads the median of 7 repetitions.
void fanout_args(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(4)->Arg(16)->Repetitions(7)->ReportAggregatesOnly(true);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_fanout)->Apply(fanout_args);
BENCHMARK(BM_fanout_plain_caf)->Apply(fanout_args);

} // namespace

int main(int argc, char** argv) {
  // Keep large blocks in the heap: with glibc's defaults every 100 MB
  // buffer is a fresh mmap whose page faults cost 10x the copy (measured:
  // 2 GB/s instead of 19 GB/s). DICE_BENCH_DEFAULT_MALLOC=1 measures that.
  if (std::getenv("DICE_BENCH_DEFAULT_MALLOC") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
