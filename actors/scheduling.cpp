// Thread priorities of role actors (dice/actors/scheduling.hpp).

#include "dice/actors/scheduling.hpp"

#include "dice/core/errc.hpp"

#include "caf/sec.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace dice {

namespace {

caf::error sys_error(const char* what) {
  return caf::make_error(caf::sec::runtime_error,
                         std::string{what} + ": " + std::strerror(errno));
}

} // namespace

caf::expected<int> lower_this_thread(int nice) {
  if (nice < 0 || nice > 39)
    return make_error(errc::invalid_config,
                      "a role thread's nice must be between 0 and 39, not "
                        + std::to_string(nice));
  // On Linux PRIO_PROCESS with a thread id addresses that thread alone
  // (POSIX would renice the whole process; Linux threads each have one).
  auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  int now = ::getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0)
    return sys_error("getpriority");
  if (nice == 0)
    return now;
  int want = now + nice > 19 ? 19 : now + nice;
  if (::setpriority(PRIO_PROCESS, tid, want) != 0)
    return sys_error("setpriority");
  return want;
}

} // namespace dice
