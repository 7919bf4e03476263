// dice's preamble as pure state machines over byte buffers: who may finish
// it, what a stranger's bytes get, and that neither side ever reads past
// its message (the channel's first bytes must stay in the socket).

#include "dice/security/auth.hpp"
#include "net/preamble.hpp"

#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <string>

namespace {

using namespace dice::net;

using dice::test::secret_1;
using dice::test::secret_2;

std::string nonce() {
  return dice::random_nonce(preamble_nonce_size);
}

/// Runs both sides against each other; returns what the acceptor read.
struct run_result {
  preamble_state dialer = preamble_state::running;
  preamble_state acceptor = preamble_state::running;
  preamble_error dialer_error = preamble_error::none;
  preamble_error acceptor_error = preamble_error::none;
  std::string d1, a1, d2;
};

run_result run(const std::string& dialer_secret,
               const std::string& acceptor_secret,
               channel ch = channel::control) {
  run_result r;
  preamble_dialer d{dialer_secret, nonce(), ch};
  preamble_acceptor a{acceptor_secret, nonce()};
  r.d1 = d.take_output();
  a.feed(r.d1.data(), r.d1.size());
  r.a1 = a.take_output();
  if (!r.a1.empty())
    d.feed(r.a1.data(), r.a1.size());
  r.d2 = d.take_output();
  if (!r.d2.empty() && a.state() == preamble_state::running)
    a.feed(r.d2.data(), r.d2.size());
  r.dialer = d.state();
  r.acceptor = a.state();
  r.dialer_error = d.error();
  r.acceptor_error = a.error();
  return r;
}

TEST(Preamble, SameSecretCompletesInThreeFixedSizeMessages) {
  auto r = run(secret_1, secret_1);
  EXPECT_EQ(r.dialer, preamble_state::done);
  EXPECT_EQ(r.acceptor, preamble_state::done);
  EXPECT_EQ(r.d1.size(), dialer_hello_size);
  EXPECT_EQ(r.a1.size(), acceptor_hello_size);
  EXPECT_EQ(r.d2.size(), dialer_proof_size);
  EXPECT_EQ(r.d1.substr(0, 4), "DICE");
  EXPECT_EQ(r.a1.substr(0, 4), "DICE");
}

TEST(Preamble, BothSidesSeeTheSameFreshBindingOfBothNonces) {
  // The data plane's proofs cover it (net/data_auth.hpp): it must match on
  // both sides and differ on every connection.
  auto bind = [] {
    preamble_dialer d{secret_1, nonce(), channel::data};
    preamble_acceptor a{secret_1, nonce()};
    auto d1 = d.take_output();
    a.feed(d1.data(), d1.size());
    auto a1 = a.take_output();
    d.feed(a1.data(), a1.size());
    auto d2 = d.take_output();
    a.feed(d2.data(), d2.size());
    EXPECT_EQ(a.state(), preamble_state::done);
    EXPECT_EQ(d.binding(), a.binding());
    EXPECT_EQ(d.binding(), d1.substr(8, 32) + a1.substr(8, 32));
    return a.binding();
  };
  auto x = bind();
  EXPECT_EQ(x.size(), 2 * preamble_nonce_size);
  EXPECT_NE(x, bind());
}

TEST(Preamble, NoSecretOnEitherSideCompletes) {
  auto r = run("", "");
  EXPECT_EQ(r.dialer, preamble_state::done);
  EXPECT_EQ(r.acceptor, preamble_state::done);
}

TEST(Preamble, WrongSecretFailsAtTheDialerBeforeItSendsAProof) {
  auto r = run(secret_2, secret_1);
  EXPECT_EQ(r.dialer, preamble_state::failed);
  EXPECT_EQ(r.dialer_error, preamble_error::bad_proof);
  EXPECT_TRUE(r.d2.empty());
  EXPECT_EQ(r.acceptor, preamble_state::running);
}

TEST(Preamble, ASecretOnOneSideOnlyIsRefusedBothWays) {
  auto r = run("", secret_1);
  EXPECT_EQ(r.acceptor, preamble_state::failed);
  EXPECT_EQ(r.acceptor_error, preamble_error::dialer_lacks_secret);
  // The acceptor still said hello, so the dialer can name the reason.
  EXPECT_EQ(r.dialer, preamble_state::failed);
  EXPECT_EQ(r.dialer_error, preamble_error::dialer_lacks_secret);
  r = run(secret_1, "");
  EXPECT_EQ(r.dialer, preamble_state::failed);
  EXPECT_EQ(r.dialer_error, preamble_error::acceptor_lacks_secret);
  EXPECT_TRUE(r.d2.empty());
}

TEST(Preamble, AForgedProofIsRefused) {
  // A stranger that speaks the framing but does not know the secret.
  preamble_dialer d{secret_2, nonce(), channel::control};
  preamble_acceptor a{secret_1, nonce()};
  auto d1 = d.take_output();
  a.feed(d1.data(), d1.size());
  ASSERT_EQ(a.take_output().size(), acceptor_hello_size);
  std::string forged(dialer_proof_size, '\x5a');
  forged[0] = static_cast<char>(channel::control);
  forged[1] = forged[2] = forged[3] = 0;
  EXPECT_EQ(a.feed(forged.data(), forged.size()), preamble_state::failed);
  EXPECT_EQ(a.error(), preamble_error::bad_proof);
}

TEST(Preamble, AReplayedProofIsRefused) {
  // A proof recorded from a genuine session does not fit another one: the
  // acceptor's nonce differs.
  auto genuine = run(secret_1, secret_1);
  ASSERT_EQ(genuine.acceptor, preamble_state::done);
  preamble_acceptor a{secret_1, nonce()};
  a.feed(genuine.d1.data(), genuine.d1.size());
  EXPECT_EQ(a.feed(genuine.d2.data(), genuine.d2.size()),
            preamble_state::failed);
  EXPECT_EQ(a.error(), preamble_error::bad_proof);
}

TEST(Preamble, AChangedChannelIsRefused) {
  preamble_dialer d{secret_1, nonce(), channel::control};
  preamble_acceptor a{secret_1, nonce()};
  auto d1 = d.take_output();
  a.feed(d1.data(), d1.size());
  auto a1 = a.take_output();
  d.feed(a1.data(), a1.size());
  auto d2 = d.take_output();
  d2[0] = 2; // a channel the dialer did not prove
  EXPECT_EQ(a.feed(d2.data(), d2.size()), preamble_state::failed);
  EXPECT_EQ(a.error(), preamble_error::bad_proof);
}

TEST(Preamble, AChannelTheAcceptorDoesNotServeIsRefusedByTheDialer) {
  auto r = run(secret_1, secret_1, static_cast<channel>(3));
  EXPECT_EQ(r.dialer, preamble_state::failed);
  EXPECT_EQ(r.dialer_error, preamble_error::unknown_channel);
  EXPECT_TRUE(r.d2.empty());
  // Without a secret, an unknown channel still gets nowhere.
  preamble_acceptor a{"", nonce()};
  preamble_dialer d{"", nonce(), channel::control};
  auto d1 = d.take_output();
  a.feed(d1.data(), d1.size());
  std::string d2(dialer_proof_size, '\0');
  d2[0] = 7;
  EXPECT_EQ(a.feed(d2.data(), d2.size()), preamble_state::failed);
  EXPECT_EQ(a.error(), preamble_error::unknown_channel);
}

TEST(Preamble, StrangerBytesFailAtTheFirstWrongByte) {
  // CAF's BASP client handshake header (operation 1): the crash frame.
  std::string basp(32, '\0');
  basp[0] = 1;
  preamble_acceptor a{secret_1, nonce()};
  EXPECT_EQ(a.feed(basp.data(), 1), preamble_state::failed);
  EXPECT_EQ(a.error(), preamble_error::not_dice);
  EXPECT_TRUE(a.take_output().empty());
  // "DIC" then garbage: refused at the fourth byte.
  preamble_acceptor b{"", nonce()};
  EXPECT_EQ(b.feed("DIC", 3), preamble_state::running);
  EXPECT_EQ(b.feed("X", 1), preamble_state::failed);
  // Right magic, unknown flags.
  preamble_acceptor c{"", nonce()};
  std::string bad_flags{"DICE\x01\x80", 6};
  EXPECT_EQ(c.feed(bad_flags.data(), bad_flags.size()), preamble_state::failed);
  EXPECT_EQ(c.error(), preamble_error::not_dice);
}

TEST(Preamble, AnotherVersionIsNamedOnBothSides) {
  preamble_dialer d{secret_1, nonce(), channel::control};
  auto d1 = d.take_output();
  d1[4] = static_cast<char>(preamble_version + 1);
  preamble_acceptor a{secret_1, nonce()};
  EXPECT_EQ(a.feed(d1.data(), d1.size()), preamble_state::failed);
  EXPECT_EQ(a.error(), preamble_error::version);
  auto a1 = a.take_output();
  a1[4] = static_cast<char>(preamble_version + 1);
  EXPECT_EQ(d.feed(a1.data(), a1.size()), preamble_state::failed);
  EXPECT_EQ(d.error(), preamble_error::version);
}

TEST(Preamble, NeverAsksForMoreThanTheCurrentMessage) {
  preamble_dialer d{secret_1, nonce(), channel::control};
  preamble_acceptor a{secret_1, nonce()};
  auto d1 = d.take_output();
  // Byte by byte: `want` counts down to the message's end, never past.
  for (std::size_t i = 0; i < d1.size(); ++i) {
    ASSERT_EQ(a.want(), d1.size() - i);
    a.feed(d1.data() + i, 1);
  }
  EXPECT_EQ(a.want(), dialer_proof_size);
  auto a1 = a.take_output();
  EXPECT_EQ(d.want(), acceptor_hello_size);
  d.feed(a1.data(), a1.size());
  EXPECT_EQ(d.want(), 0u);
  EXPECT_EQ(d.state(), preamble_state::done);
  // Feeding more than asked is refused, not buffered.
  auto d2 = d.take_output() + "BASP";
  EXPECT_EQ(a.feed(d2.data(), d2.size()), preamble_state::failed);
}

} // namespace
