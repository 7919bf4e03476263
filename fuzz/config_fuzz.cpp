// Node options as a user, a launcher or SLURM's environment gives them.

#include "dice/core/role.hpp"
#include "dice/runtime/node.hpp"

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  std::string_view str{reinterpret_cast<const char*>(data), size};
  (void)dice::parse_endpoints(str);
  (void)dice::parse_role_set(str);
  (void)dice::parse_topology(str);
  if (auto hosts = dice::expand_slurm_hosts(str);
      hosts && hosts->empty() && !str.empty() && str.find(',') == str.npos)
    (void)hosts;
  (void)dice::expand_slurm_tasks(str);
  return 0;
}
