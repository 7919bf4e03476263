#pragma once

#include "dice/actors/model_loader.hpp"
#include "dice/core/model.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace dice {

/// Whether a periodical model exchanger sends or receives.
enum class exchange_mode : std::uint8_t { send, receive };

/// Parses "send" or "receive"; anything else is `errc::invalid_config`
/// (DI-engine raised NotImplementedError on the first call).
caf::expected<exchange_mode> parse_exchange_mode(std::string_view str);

/// Options of the periodical model exchanger (DI-engine's
/// PeriodicalModelExchanger).
struct periodical_model_exchanger_options {
  /// Send or receive.
  exchange_mode mode = exchange_mode::receive;
  /// Send every `period` iterations; a receiver accepts only ids that are
  /// multiples of its own period (DI-engine's filter).
  std::int64_t period = 1;
  /// How old (since arrival) a cached model may be when it is loaded or
  /// reused; older ones are dropped. Default: no limit.
  caf::timespan delay_toleration = caf::timespan::max();
  /// A loaded model is used for at most this many iterations.
  std::int64_t stale_toleration = 1;
  /// Topic of the exchange.
  std::string event_name = "model_exchanger";
  /// How long a receiver waits for a model (DI-engine: 60 s).
  caf::timespan timeout = std::chrono::seconds{60};
  /// DI-engine's `model_loader=` (see model_exchanger_options). Unlike
  /// DI-engine, the stored snapshot keeps its id and time, so this path
  /// works.
  model_loader_actor model_loader;
};

/// DI-engine's PeriodicalModelExchanger, without its spinning: a cached
/// model that is not newer, or too old, is dropped instead of retried.
middleware periodical_model_exchanger(model_port_ptr model,
                                      periodical_model_exchanger_options opts);

} // namespace dice
