#include "dice/runtime/cpu_latency.hpp"

#include "dice/core/errc.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dice {

caf::expected<cpu_latency_request>
cpu_latency_request::hold(std::int32_t us, const std::string& device) {
  if (us < 0)
    return make_error(errc::invalid_config,
                      "a CPU latency request must be 0 us or more, not "
                        + std::to_string(us));
  unique_fd fd{::open(device.c_str(), O_WRONLY | O_CLOEXEC)};
  if (fd.get() < 0) {
    auto why = std::string{std::strerror(errno)};
    return make_error(errc::invalid_config,
                      "cannot hold a CPU latency request: " + device + ": "
                        + why + " (it needs root or write access)");
  }
  // The kernel takes the bound as a binary 32-bit value (or as hex text);
  // it holds it until the file is closed.
  if (::write(fd.get(), &us, sizeof(us)) != static_cast<ssize_t>(sizeof(us))) {
    auto why = std::string{std::strerror(errno)};
    return make_error(errc::invalid_config,
                      "cannot hold a CPU latency request: writing " + device
                        + ": " + why);
  }
  return cpu_latency_request{std::move(fd), us};
}

} // namespace dice
