// The data plane under TLS (data_plane_fixture.hpp): bytes arrive whole
// over TLS, and plain TCP or a foreign certificate on the data channel gets
// nothing.

#include "data_plane_fixture.hpp"

namespace {

// The fixture's namespace also brings its using-declarations (chrono
// literals, data_plane, secret_1, clock_type).
using namespace dice::test::plane;

// Both planes with the node's TLS files: data connections run TLS.
class DataPlaneTls : public DataPlane {
 protected:
  dice::tls_files tls() const override {
    return certs();
  }

  // A third plane, node 3, with `files`, that has a session with node 1.
  std::shared_ptr<data_plane> other(dice::tls_files files) {
    dice::net::data_plane_config c;
    c.node = 3;
    c.secret = secret_1;
    c.tls = std::move(files);
    c.same_host = false;
    auto dp = data_plane::make(sys, c);
    auto h = hello(3);
    dp->dial(1, "127.0.0.1", port, h.mine, h.theirs);
    return dp;
  }
};

TEST_F(DataPlaneTls, BytesArriveWholeOverTls) {
  ASSERT_TRUE(acceptor->tls() && dialer->tls());
  auto before = dice::net::data_stats();
  bytes_both_ways();
  if (HasFatalFailure())
    return;
  auto after = dice::net::data_stats();
  EXPECT_EQ(after.refused, before.refused);
  EXPECT_EQ(after.torn, before.torn);
}

TEST_F(DataPlaneTls, PlainTcpOnTheDataChannelGetsNothing) {
  auto before = dice::net::data_stats();
  auto h = hello();
  // A valid proof of the session, but in the clear: the acceptor expects
  // a TLS handshake and never reads it as a bind.
  std::string binding;
  auto fd = dial_data(secret_1, &binding);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
    send_bytes(fd, bind(dice::net::data_dialer_writes, 2, h.key, binding)));
  std::string got;
  auto r = wait_closed(fd, 3000ms, &got);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(got.find("DACK"), std::string::npos);
  ::close(fd);
  // A plane without TLS files dials as the real code would.
  auto plain = other({});
  EXPECT_FALSE(plain->wait_sendable(1, 5s));
  plain->stop();
  // The acceptor counts before it closes: the raw attempt and whichever of
  // the plane's two connections failed first are counted by now (its
  // second may still be on the way).
  EXPECT_GE(dice::net::data_stats().refused - before.refused, 2u);
}

TEST_F(DataPlaneTls, AForeignCertificateGetsNothing) {
  auto before = dice::net::data_stats();
  // A certificate the cluster's CA did not sign.
  auto stranger = other(certs("stranger-"));
  ASSERT_TRUE(stranger->tls());
  EXPECT_FALSE(stranger->wait_sendable(1, 5s));
  stranger->stop();
  // The stranger gives up first (it checks the acceptor's certificate);
  // joining the acceptor's threads makes its refusal of the first
  // connection visible.
  acceptor->stop();
  EXPECT_GE(dice::net::data_stats().refused - before.refused, 1u);
  EXPECT_EQ(dice::net::data_stats().links_opened, before.links_opened);
}

} // namespace
