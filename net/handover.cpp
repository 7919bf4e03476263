#include "net/handover.hpp"

#include "dice/core/errc.hpp"

#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/network/default_multiplexer.hpp"
#include "caf/io/network/native_socket.hpp"
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

class tls_scribe : public io::scribe {
 public:
  tls_scribe(network::default_multiplexer& mpx, network::native_socket fd,
             session_ptr session)
    : io::scribe(network::conn_hdl_from_socket(fd)),
      stream_(mpx, fd, std::move(session)) {
    // nop
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
};

} // namespace

caf::actor basp_broker_of(caf::actor_system& sys) {
  return sys.middleman().named_broker<io::basp_broker>(caf::atom("BASP"));
}

caf::expected<io::scribe_ptr> make_scribe(caf::actor_system& sys, unique_fd fd,
                                          bool tls, bool accepting) {
  auto& backend = sys.middleman().backend();
  // The hand-over: from new_scribe (or the TLS scribe's stream) on, CAF's
  // multiplexer owns the socket and closes it with the scribe.
  if (!tls)
    return backend.new_scribe(fd.release());
  auto mpx = dynamic_cast<network::default_multiplexer*>(&backend);
  if (mpx == nullptr)
    return make_error(errc::invalid_config,
                      "TLS needs CAF's default network backend");
  // The session only uses the fd; it does not own it.
  auto session = caf::openssl::make_session(sys, fd.get(), accepting);
  if (!session)
    return make_error(errc::handshake_failed,
                      "cannot start a TLS session on the connection");
  return caf::make_counted<tls_scribe>(*mpx, fd.release(), std::move(session));
}

void serve_basp(const caf::actor& basp, io::scribe_ptr scribe,
                std::uint16_t port, const caf::actor& whom,
                std::set<std::string> sigs) {
  caf::anon_send(basp, caf::publish_atom::value, std::move(scribe), port,
                 caf::actor_cast<caf::strong_actor_ptr>(whom), std::move(sigs));
}

} // namespace dice::net
