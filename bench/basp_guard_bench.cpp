// What dice's BASP guard (net/basp_guard.hpp) costs per frame, beside the
// cheapest thing a frame costs anyway: copying its bytes once. bench/run
// relates it to the time of a whole small context delta measured in the
// same run (issue 24: within 2 % of the BASP path).

#include "net/basp_guard.hpp"

#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

namespace {

// A direct message header as CAF writes it (big-endian), announcing
// `payload` bytes to actor 9.
std::string header_for(std::uint32_t payload) {
  std::string h(32, '\0');
  h[0] = 2;
  for (int i = 0; i < 4; ++i)
    h[4 + i] = static_cast<char>((payload >> (24 - 8 * i)) & 0xFF);
  h[31] = 9;
  return h;
}

// One frame through the guard: its header, then its payload.
void BM_GuardFrame(benchmark::State& state) {
  auto n = static_cast<std::uint32_t>(state.range(0));
  auto h = header_for(n);
  std::string payload(n, 'x');
  dice::net::basp_guard g;
  for (auto _ : state) {
    auto a = g.check(h.data(), h.size());
    auto b = g.check(payload.data(), payload.size());
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_GuardFrame)->Arg(200);

// Baseline: copying the same frame (header and payload) once.
void BM_CopyFrame(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  std::string src = header_for(static_cast<std::uint32_t>(n))
    + std::string(n, 'x');
  std::string dst(src.size(), '\0');
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_CopyFrame)->Arg(200);

} // namespace

BENCHMARK_MAIN();
