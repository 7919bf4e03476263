#pragma once

#include "dice/core/model.hpp"
#include "dice/pipeline/middleware.hpp"

namespace dice {

/// A learner's greeting: before its first iteration it publishes its current
/// model (version 0) and train_iter on the topics the model and context
/// exchangers use. Collectors that outlived a previous learner are waiting
/// for exactly these two (with a 60 s deadline) and would otherwise wait
/// for data this new learner is itself waiting for; with the greeting they
/// load the new learner's model and train_iter at once, before they produce
/// data again. The router retains both, so a node that connects later gets
/// them too. Put it first in the learner's pipeline; other roles ignore it.
middleware learner_hello(model_port_ptr model);

} // namespace dice
