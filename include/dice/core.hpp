#pragma once

// dice's engine without LibTorch: nodes and dice::run, the pipeline
// vocabulary, the exchangers and loaders, messages, logs. Link dice::core.
// A program that trains a network includes dice/dice.hpp instead.

#include "dice/actors/model_loader.hpp"
#include "dice/actors/scheduling.hpp"
#include "dice/actors/storage_loader.hpp"
#include "dice/core/errc.hpp"
#include "dice/core/model.hpp"
#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/exchangers/learner_hello.hpp"
#include "dice/exchangers/loader_options.hpp"
#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/payload.hpp"
#include "dice/messages/value.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/pipeline/node_services.hpp"
#include "dice/pipeline/topic.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/runtime/main.hpp"
#include "dice/runtime/node.hpp"
#include "dice/runtime/node_config.hpp"
#include "dice/runtime/run.hpp"
#include "dice/type_ids.hpp"
