#pragma once

// A loopback listener that hands data connections to a data plane (and
// closes anything else): what the data-plane tests listen with.

#include "net/data_plane.hpp"
#include "net/listener.hpp"

#include <memory>
#include <string>

namespace dice::test {

/// Opens and starts a listener on an ephemeral loopback port whose data
/// connections go to `dp`.
inline caf::expected<std::unique_ptr<net::listener>>
open_data_listener(std::shared_ptr<net::data_plane> dp,
                   const std::string& secret) {
  auto ln = net::listener::open(net::listener_config{1, "127.0.0.1", 0, secret},
                                [dp](unique_fd fd, net::channel ch,
                                     const std::string& peer,
                                     const std::string& binding) {
                                  // Anything else closes with `fd`.
                                  if (ch == net::channel::data)
                                    dp->accept(std::move(fd), peer, binding);
                                });
  if (ln)
    (*ln)->start();
  return ln;
}

} // namespace dice::test
