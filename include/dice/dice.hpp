#pragma once

// The whole public API a dice program needs, in one include: the engine
// (dice/core.hpp), environments (dice::env, dice::vector_env, dice::envs),
// LibTorch models and checkpoints (dice::torch) and the algorithms
// (dice::rl). Link dice::rl.

#include "dice/core.hpp"
#include "dice/env/env.hpp"
#include "dice/env/space.hpp"
#include "dice/env/vector_env.hpp"
#include "dice/envs/cartpole.hpp"
#include "dice/envs/pendulum.hpp"
#include "dice/rl/rl.hpp"
#include "dice/torch/checkpoint.hpp"
#include "dice/torch/learner_group_member.hpp"
#include "dice/torch/model.hpp"
#include "dice/torch/tensor.hpp"
