#pragma once

// Replay of a recorded DQN or PPO learner (--dice.replay=DIR, record.hpp,
// docs/replay.md): the same program with the same options runs its
// learner alone from DIR/learner.rec and checks that every iteration ends
// with the recorded weights.

#include "dice/rl/dqn_agent.hpp"
#include "dice/rl/ppo_agent.hpp"
#include "dice/rl/record.hpp"

#include "caf/expected.hpp"

#include <string>

namespace dice::rl {

/// What a DQN record holds of the options (JSON): everything that changes
/// the learner's weights.
std::string dqn_record_options(const dqn_run_options& x);

/// What a PPO record holds of the options (JSON).
std::string ppo_record_options(const ppo_agent_options& x);

/// Replays the DQN learner recorded in `cfg.replay` with the options of
/// `cfg` (which must be the recorded run's); its checkpoints go to
/// REPLAY/replay/. The first diverging iteration is errc::model_mismatch.
caf::expected<replay_report> replay_dqn(const dqn_run_config& cfg);

/// Replays the PPO learner recorded in `cfg.replay` with the options of
/// `cfg` and `ppo`, the spaces of `make_env` (like use_ppo).
caf::expected<replay_report> replay_ppo(const run_config& cfg,
                                        const ppo_cli& ppo,
                                        const vector_env::factory& make_env);

/// Prints what a replay of `dir` did (stdout) or why it failed (stderr);
/// the exit code (0: every hash matched, 1 otherwise).
int print_replay(const caf::expected<replay_report>& x, const std::string& dir);

} // namespace dice::rl
