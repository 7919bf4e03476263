#include "dice/core/errc.hpp"

#include "caf/atom.hpp"
#include "caf/message.hpp"

namespace dice {

std::string to_string(errc x) {
  switch (x) {
    case errc::none: return "none";
    case errc::malformed_input: return "malformed_input";
    case errc::too_large: return "too_large";
    case errc::model_mismatch: return "model_mismatch";
    case errc::timeout: return "timeout";
    case errc::finished: return "finished";
    case errc::storage_missing: return "storage_missing";
    case errc::storage_failed: return "storage_failed";
    case errc::handshake_failed: return "handshake_failed";
    case errc::invalid_config: return "invalid_config";
    case errc::unknown_topic: return "unknown_topic";
    case errc::wrong_role: return "wrong_role";
    case errc::user_exception: return "user_exception";
    case errc::unreachable: return "unreachable";
    case errc::unauthorized: return "unauthorized";
    case errc::retry_later: return "retry_later";
    case errc::env_failed: return "env_failed";
    case errc::invalid_action: return "invalid_action";
  }
  return "unknown";
}

caf::error make_error(errc code, std::string what) {
  return caf::error{static_cast<std::uint8_t>(code), caf::atom("dice"),
                    caf::make_message(std::move(what))};
}

caf::error make_error(errc code) {
  return caf::error{static_cast<std::uint8_t>(code), caf::atom("dice")};
}

bool is(const caf::error& err, errc code) {
  // CAF 0.17's category() dereferences an empty error (a normal exit).
  return err && err.category() == caf::atom("dice")
    && err.code() == static_cast<std::uint8_t>(code);
}

std::string render(const caf::error& err) {
  if (!err)
    return "none";
  if (err.category() == caf::atom("dice")) {
    auto result = to_string(static_cast<errc>(err.code()));
    auto& ctx = err.context();
    if (ctx.match_elements<std::string>())
      result += ": " + ctx.get_as<std::string>(0);
    else if (!ctx.empty())
      result += ": " + to_string(ctx);
    return result;
  }
  return caf::to_string(err);
}

} // namespace dice
