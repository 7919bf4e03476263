#pragma once

// Every header of dice::rl.

#include "dice/rl/actor_critic.hpp"
#include "dice/rl/distributions.hpp"
#include "dice/rl/dqn.hpp"
#include "dice/rl/dqn_agent.hpp"
#include "dice/rl/epsilon.hpp"
#include "dice/rl/evaluator.hpp"
#include "dice/rl/exchange.hpp"
#include "dice/rl/files.hpp"
#include "dice/rl/intake.hpp"
#include "dice/rl/network.hpp"
#include "dice/rl/outputs.hpp"
#include "dice/rl/ppo.hpp"
#include "dice/rl/ppo_agent.hpp"
#include "dice/rl/replay_buffer.hpp"
#include "dice/rl/returns.hpp"
#include "dice/rl/run_config.hpp"
#include "dice/rl/segment_builder.hpp"
#include "dice/rl/segments.hpp"
#include "dice/rl/transitions.hpp"
