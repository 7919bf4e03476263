#pragma once

// mujoco_bench: how much of the simulator's speed reaches a dice
// collector, Sample Factory's measure (training throughput as a share of
// pure simulation), on Hopper-v4:
//
//   mujoco_bench sim  [--seconds S] [--envs N]
//       the envs alone stepping uniform random actions on one thread;
//   mujoco_bench bare [--seconds S] [--envs N] [--hidden H] [--layers L]
//       the same envs and PPO's actor-critic (batched act() of N
//       observations, actions clipped) in a bare loop: the limit with
//       inference;
//   mujoco_bench dice [dice::run options] [--seconds S] [--warmup W]
//       the same through dice: dice::rl's ppo_collector on every collector
//       node, the exchangers on, a learner that counts what arrives and
//       discards it (one model per learner iteration; no training);
//       embedded (--collectors N) or one node per process (dice-launch).
//
// Each prints one JSON line (the dice learner's has "role": "learner").

#include "dice/env/env.hpp"
#include "dice/rl/actor_critic.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace dice::bench::mujoco {

/// `n` Hopper-v4 envs seeded 0..n-1.
std::vector<std::unique_ptr<dice::env>> make_hoppers(std::int64_t n);

/// PPO's actor-critic for Hopper-v4 with `layers` hidden layers of `hidden`.
dice::rl::actor_critic make_policy(std::int64_t hidden, std::int64_t layers);

/// Bytes of the network's state_dict (what one model exchange moves).
std::int64_t state_bytes(dice::rl::actor_critic& net);

/// `mujoco_bench sim|bare ...` (loops.cpp).
int loops_main(int argc, char** argv);

/// `mujoco_bench dice ...` (through_dice.cpp), "dice" taken out of argv.
int dice_main(int argc, char** argv);

} // namespace dice::bench::mujoco
