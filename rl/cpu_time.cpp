#include "dice/rl/cpu_time.hpp"

#include <sys/resource.h>

#include <ctime>

namespace dice::rl {

double thread_cpu_seconds() noexcept {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return static_cast<double>(ts.tv_sec)
    + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double process_cpu_seconds() noexcept {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec)
      + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

} // namespace dice::rl
