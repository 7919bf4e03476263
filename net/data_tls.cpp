#include "data_tls.hpp"

#include "dice/core/errc.hpp"

#include <openssl/err.h>

#include <cstring>

namespace dice::net {

void ssl_free_fn::operator()(ssl_st* x) const noexcept {
  SSL_free(x);
}

std::string ssl_errors() {
  std::string msg;
  while (auto err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    if (!msg.empty())
      msg += "; ";
    msg += buf;
  }
  return msg.empty() ? std::string{"connection closed or timed out"} : msg;
}

caf::expected<std::shared_ptr<data_tls>> data_tls::make(const tls_files& x) {
  if (auto err = validate(x))
    return err;
  std::shared_ptr<data_tls> result{new data_tls};
  auto fail = [](const std::string& what) {
    return make_error(errc::invalid_config,
                      "TLS on data connections: " + what + ": " + ssl_errors());
  };
  result->ctx_ = SSL_CTX_new(TLS_method());
  auto ctx = result->ctx_;
  if (ctx == nullptr)
    return fail("cannot create a context");
  // As CAF's openssl session with authentication: a certificate on both
  // sides, verified against the CA, no anonymous ciphers.
  if (SSL_CTX_use_certificate_chain_file(ctx, x.certificate.c_str()) != 1)
    return fail("cannot load certificate '" + x.certificate + "'");
  if (SSL_CTX_use_PrivateKey_file(ctx, x.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return fail("cannot load key '" + x.key + "'");
  if (SSL_CTX_load_verify_locations(ctx, x.cafile.c_str(), nullptr) != 1)
    return fail("cannot load CA '" + x.cafile + "'");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  if (SSL_CTX_set_cipher_list(ctx, "HIGH:!aNULL:!MD5") != 1)
    return fail("cannot set the cipher list");
  // Each data connection carries bytes one way: no session tickets (a
  // client that never reads would leave them in its socket), no resumption.
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  // A peer that closes without close_notify ends the stream like a TCP
  // close: transfers carry their size and checksum, so a cut one is still
  // dropped whole (the reader counts it torn).
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  return result;
}

data_tls::~data_tls() {
  SSL_CTX_free(ctx_);
}

caf::expected<ssl_ptr> data_tls::handshake(int fd, bool accepting) const {
  ERR_clear_error();
  ssl_ptr ssl{SSL_new(ctx_)};
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1)
    return make_error(errc::handshake_failed, "TLS: " + ssl_errors());
  auto rc = accepting ? SSL_accept(ssl.get()) : SSL_connect(ssl.get());
  if (rc != 1) {
    auto why = ssl_errors();
    auto v = SSL_get_verify_result(ssl.get());
    if (v != X509_V_OK)
      why += std::string{" (certificate: "} + X509_verify_cert_error_string(v)
        + ")";
    return make_error(errc::handshake_failed, "TLS handshake failed: " + why);
  }
  return ssl;
}

std::string tls_binding(SSL* ssl) {
  std::string out(32, '\0');
  static constexpr char label[] = "EXPORTER-dice-data-bind";
  if (SSL_export_keying_material(
        ssl, reinterpret_cast<unsigned char*>(out.data()), out.size(), label,
        std::strlen(label), nullptr, 0, 0)
      != 1)
    return {};
  return out;
}

} // namespace dice::net
