#include "dice/security/auth.hpp"

#include "dice/core/errc.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace dice {

std::string random_nonce(std::size_t n) {
  std::string result(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&result[0]),
                 static_cast<int>(n))
      != 1)
    // No randomness means no authentication worth the name.
    throw std::runtime_error("RAND_bytes failed");
  return result;
}

std::string sha256(const void* data, std::size_t n) {
  std::string out(32, '\0');
  unsigned len = 0;
  if (EVP_Digest(data, n, reinterpret_cast<unsigned char*>(out.data()), &len,
                 EVP_sha256(), nullptr)
        != 1
      || len != out.size())
    throw std::runtime_error("SHA-256 failed");
  return out;
}

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
       &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string hmac_sha256(const std::string& key,
                        std::initializer_list<std::string_view> parts) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  auto ctx = HMAC_CTX_new();
  HMAC_Init_ex(ctx, key.data(), static_cast<int>(key.size()), EVP_sha256(),
               nullptr);
  for (auto part : parts)
    HMAC_Update(ctx, reinterpret_cast<const unsigned char*>(part.data()),
                part.size());
  HMAC_Final(ctx, out, &len);
  HMAC_CTX_free(ctx);
  return std::string(reinterpret_cast<char*>(out), len);
}

caf::error refuse_foreign_file(std::uint32_t uid, std::uint32_t mode,
                               const std::string& path) {
  if (uid != ::geteuid())
    return make_error(errc::storage_failed,
                      path + " belongs to uid " + std::to_string(uid)
                        + ", not to this user (uid "
                        + std::to_string(::geteuid()) + "): refused");
  if ((mode & 022) != 0) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%04o", mode & 07777);
    return make_error(errc::storage_failed,
                      path + " has mode " + buf
                        + ": group or others may have written it; refused");
  }
  return caf::none;
}

std::string spool_key(const std::string& secret) {
  if (secret.empty())
    return {};
  return hmac_sha256(secret, std::string("dice-spool-key", 15));
}

bool same_mac(const std::string& x, const std::string& y) noexcept {
  return x.size() == y.size() && !x.empty()
    && CRYPTO_memcmp(x.data(), y.data(), x.size()) == 0;
}

std::string acceptor_proof(const std::string& secret,
                           const std::string& nonce_a,
                           const std::string& nonce_b) {
  return hmac_sha256(secret,
                     std::string("dice-accept", 12) + nonce_a + nonce_b);
}

std::string attacher_proof(const std::string& secret,
                           const std::string& nonce_a,
                           const std::string& nonce_b, std::uint32_t node) {
  return hmac_sha256(secret,
                     std::string("dice-attach", 12) + nonce_b + nonce_a
                       + std::to_string(node));
}

caf::expected<std::string> load_secret(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::invalid_config,
                      "cannot read the cluster secret file '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  auto secret = buf.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
    secret.pop_back();
  if (secret.size() < min_secret_bytes)
    return make_error(errc::invalid_config,
                      "the cluster secret in '" + path + "' is shorter than "
                        + std::to_string(min_secret_bytes) + " bytes");
  return secret;
}

namespace {

struct file_closer {
  void operator()(std::FILE* f) const {
    std::fclose(f);
  }
};

using file_ptr = std::unique_ptr<std::FILE, file_closer>;

file_ptr open(const std::string& path) {
  return file_ptr{std::fopen(path.c_str(), "rb")};
}

} // namespace

caf::error validate(const tls_files& x) {
  auto bad = [](std::string what) {
    return make_error(errc::invalid_config, "TLS: " + std::move(what));
  };
  if (x.certificate.empty() || x.key.empty() || x.cafile.empty())
    return bad("openssl.certificate, openssl.key and openssl.cafile must all "
               "be set (CAF would otherwise fall back to unauthenticated "
               "TLS)");
  auto cf = open(x.certificate);
  if (!cf)
    return bad("cannot read certificate '" + x.certificate + "'");
  std::unique_ptr<X509, decltype(&X509_free)> cert{
    PEM_read_X509(cf.get(), nullptr, nullptr, nullptr), X509_free};
  if (!cert)
    return bad("'" + x.certificate + "' is not a PEM certificate");
  auto kf = open(x.key);
  if (!kf)
    return bad("cannot read key '" + x.key + "'");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{
    PEM_read_PrivateKey(kf.get(), nullptr, nullptr, nullptr), EVP_PKEY_free};
  if (!key)
    return bad("'" + x.key + "' is not an unencrypted PEM private key");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return bad("key '" + x.key + "' does not match certificate '"
               + x.certificate + "'");
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store{
    X509_STORE_new(), X509_STORE_free};
  if (!store || X509_STORE_load_file(store.get(), x.cafile.c_str()) != 1)
    return bad("cannot load CA file '" + x.cafile + "'");
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx{
    X509_STORE_CTX_new(), X509_STORE_CTX_free};
  if (!ctx
      || X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1)
    return bad("cannot set up certificate verification");
  if (X509_verify_cert(ctx.get()) != 1)
    return bad(
      "certificate '" + x.certificate + "' is not signed by the CA in '"
      + x.cafile + "': "
      + X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
  return caf::none;
}

} // namespace dice
