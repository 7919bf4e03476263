#include "net/handover.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/logging/sampler.hpp"
#include "dice/security/trust.hpp"
#include "net/basp_guard.hpp"

#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/network/default_multiplexer.hpp"
#include "caf/io/network/native_socket.hpp"
#include "caf/io/network/scribe_impl.hpp"
#include "caf/io/network/stream_impl.hpp"
#include "caf/openssl/session.hpp"
#include "caf/send.hpp"

#include <unistd.h>

namespace dice::net {

namespace {

namespace io = caf::io;
namespace network = caf::io::network;
using caf::openssl::session_ptr;

// CAF 0.17 keeps its TLS scribe private to libcaf_openssl's middleman
// actor, which only dials and accepts by itself. This is the same thin
// adapter (a stream whose reads and writes go through CAF's exported
// openssl::session), so TLS can start on a socket dice has already
// authenticated.
struct tls_policy {
  explicit tls_policy(session_ptr x) : session(std::move(x)) {
    // nop
  }

  caf::io::network::rw_state read_some(std::size_t& result,
                                       network::native_socket fd, void* buf,
                                       std::size_t len) {
    return session->read_some(result, fd, buf, len);
  }

  caf::io::network::rw_state write_some(std::size_t& result,
                                        network::native_socket fd,
                                        const void* buf, std::size_t len) {
    return session->write_some(result, fd, buf, len);
  }

  bool try_accept(network::native_socket&, network::native_socket) {
    return false; // streams never accept
  }

  bool must_read_more(network::native_socket fd, std::size_t threshold) {
    return session->must_read_more(fd, threshold);
  }

  session_ptr session;
};

// Closes a connection whose BASP frame the guard refused, counted and
// logged (sampled per peer host: a member repeating it must not flood the
// log). Runs in the multiplexer's thread, inside the scribe's read.
bool refuse_frame(io::scribe& s, caf::execution_unit* ctx, std::uint32_t node,
                  const std::string& why) {
  static log::sampler sampled;
  count(trust_event::frame_rejected);
  auto peer = s.addr();
  if (auto n = sampled.next(peer))
    log::warning(node,
                 "closed the connection from " + peer
                   + ": BASP frame refused before CAF read it: " + why
                   + log::sampled_note(n));
  // As a failed read: the broker gets connection_closed and drops the
  // connection's state; the socket closes with the scribe.
  s.io_failure(ctx, network::operation::read);
  return false;
}

// CAF's own plain-TCP scribe with the guard in front of the broker.
class guarded_scribe : public network::scribe_impl {
 public:
  guarded_scribe(network::default_multiplexer& mpx, network::native_socket fd,
                 std::uint32_t node, std::uint32_t max_payload)
    : network::scribe_impl(mpx, fd), node_(node), guard_(max_payload) {
    // nop
  }

  bool consume(caf::execution_unit* ctx, const void* buf,
               std::size_t n) override {
    if (auto why = guard_.check(buf, n); !why.empty())
      return refuse_frame(*this, ctx, node_, why);
    return network::scribe_impl::consume(ctx, buf, n);
  }

 private:
  std::uint32_t node_;
  basp_guard guard_;
};

class tls_scribe : public io::scribe {
 public:
  tls_scribe(network::default_multiplexer& mpx, network::native_socket fd,
             session_ptr session, std::uint32_t node, std::uint32_t max_payload)
    : io::scribe(network::conn_hdl_from_socket(fd)),
      stream_(mpx, fd, std::move(session)), node_(node), guard_(max_payload) {
    // nop
  }

  bool consume(caf::execution_unit* ctx, const void* buf,
               std::size_t n) override {
    if (auto why = guard_.check(buf, n); !why.empty())
      return refuse_frame(*this, ctx, node_, why);
    return io::scribe::consume(ctx, buf, n);
  }

  void configure_read(io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_)
      launch();
  }

  void ack_writes(bool enable) override {
    stream_.ack_writes(enable);
  }

  std::vector<char>& wr_buf() override {
    return stream_.wr_buf();
  }

  std::vector<char>& rd_buf() override {
    return stream_.rd_buf();
  }

  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }

  void flush() override {
    stream_.flush(this);
  }

  std::string addr() const override {
    auto x = network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string{};
  }

  std::uint16_t port() const override {
    auto x = network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }

  void add_to_loop() override {
    stream_.activate(this);
  }

  void remove_from_loop() override {
    stream_.passivate();
  }

 private:
  void launch() {
    launched_ = true;
    stream_.start(this);
    // Schedules a write so a pending SSL_accept/SSL_connect makes progress
    // even before the broker writes anything (as CAF's own TLS scribe).
    stream_.force_empty_write(this);
  }

  bool launched_ = false;
  network::stream_impl<tls_policy> stream_;
  std::uint32_t node_;
  basp_guard guard_;
};

} // namespace

caf::actor basp_broker_of(caf::actor_system& sys) {
  return sys.middleman().named_broker<io::basp_broker>(caf::atom("BASP"));
}

caf::expected<io::scribe_ptr> make_scribe(caf::actor_system& sys, unique_fd fd,
                                          bool tls, bool accepting,
                                          scribe_limits limits) {
  auto& backend = sys.middleman().backend();
  // Both scribes are CAF's own streams on CAF's multiplexer (which owns
  // the socket from here on and closes it with the scribe), with the guard
  // in front of the broker.
  auto mpx = dynamic_cast<network::default_multiplexer*>(&backend);
  if (mpx == nullptr)
    return make_error(errc::invalid_config,
                      "dice needs CAF's default network backend");
  if (!tls)
    return caf::make_counted<guarded_scribe>(*mpx, fd.release(), limits.node,
                                             limits.max_basp_payload);
  // The session only uses the fd; it does not own it.
  auto session = caf::openssl::make_session(sys, fd.get(), accepting);
  if (!session)
    return make_error(errc::handshake_failed,
                      "cannot start a TLS session on the connection");
  return caf::make_counted<tls_scribe>(*mpx, fd.release(), std::move(session),
                                       limits.node, limits.max_basp_payload);
}

void serve_basp(const caf::actor& basp, io::scribe_ptr scribe,
                std::uint16_t port, const caf::actor& whom,
                std::set<std::string> sigs) {
  caf::anon_send(basp, caf::publish_atom::value, std::move(scribe), port,
                 caf::actor_cast<caf::strong_actor_ptr>(whom), std::move(sigs));
}

} // namespace dice::net
