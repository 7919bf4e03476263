#pragma once

// A node's CPU latency request (--dice.cpu-latency-us). Where idle CPUs
// halt, a thread woken on one waits for the CPU to wake first: on this
// project's 2-vCPU VMs (Firecracker, guest halt-polling off) `perf sched`
// shows 30-45 us from the wake to the run, every time, and a remote
// snapshot's round crosses four such hand-offs where raw TCP has two
// (docs/distributed.md, "Idle CPUs that halt"). Linux's PM QoS interface
// lets a process ask that no idle CPU take longer than a bound to wake:
// with 0, idle CPUs poll instead of halting while the request is held. It
// is the machine's setting, not the process's (every process gains, and
// idle CPUs burn power or the host's time), so it is opt-in.

#include "dice/process/unique_fd.hpp"

#include "caf/expected.hpp"

#include <cstdint>
#include <string>

namespace dice {

/// Where Linux takes PM QoS CPU latency requests.
inline constexpr const char* cpu_latency_device = "/dev/cpu_dma_latency";

/// A PM QoS request that no idle CPU take longer than a bound to wake up,
/// held while the object lives (the kernel drops it when the file closes,
/// also when the process dies).
class cpu_latency_request {
 public:
  /// Holds a request of `us` microseconds (0: idle CPUs poll, never halt).
  /// Fails with errc::invalid_config, saying why, when `us` is negative or
  /// `device` cannot be written (it needs root or write access).
  static caf::expected<cpu_latency_request>
  hold(std::int32_t us, const std::string& device = cpu_latency_device);

  /// Takes `other`'s request; `other` holds none afterwards.
  cpu_latency_request(cpu_latency_request&& other) noexcept = default;

  /// Drops the request it holds and takes `other`'s.
  cpu_latency_request&
  operator=(cpu_latency_request&& other) noexcept = default;

  /// Drops the request now (node::stop: its copies share one).
  void release() noexcept {
    fd_.reset();
  }

  /// The bound it asked for, in microseconds.
  std::int32_t microseconds() const noexcept {
    return us_;
  }

 private:
  cpu_latency_request(unique_fd fd, std::int32_t us) noexcept
    : fd_(std::move(fd)), us_(us) {
    // nop
  }

  unique_fd fd_;
  std::int32_t us_ = 0;
};

} // namespace dice
