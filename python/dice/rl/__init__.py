"""dice.rl: the reusable parts of dice's Python RL examples.

- ``dice.rl.envs``: Gymnasium's CartPole-v1 in numpy, alone and vectorised.
- ``dice.rl.replay``: n-step transitions from a batch of envs, replay buffer.
- ``dice.rl.dqn``: the Q-network, epsilon-greedy acting, greedy evaluation
  and DQNLearner (double DQN, target net, Huber loss, Adam).
- ``dice.rl.outputs``: what a run writes (metrics.jsonl, the progress
  line, summary.json, eval_return.png, checkpoints), as the C++ examples.

examples/python/dqn_cartpole.py puts them together on dice's task. Needs
numpy and torch.
"""

from .envs import CartPoleEnv, CartPoleVecEnv
from .outputs import (EvalPoint, ProgressLine, RunOutputs, Window,
                      add_run_options, fixed, node_info, read_json,
                      save_state_dict, write_eval_plot, write_json)
from .replay import NStep, ReplayBuffer
from .dqn import (DQNLearner, add_dqn_options, epsilon_greedy, greedy_actions,
                  hidden_sizes, linear_epsilon, play_greedy, q_network,
                  q_values)

__all__ = ["CartPoleEnv", "CartPoleVecEnv", "NStep", "ReplayBuffer",
           "DQNLearner", "add_dqn_options", "hidden_sizes", "q_network",
           "q_values", "linear_epsilon", "greedy_actions", "epsilon_greedy",
           "play_greedy", "RunOutputs", "ProgressLine", "Window", "EvalPoint",
           "add_run_options", "fixed", "node_info", "write_json", "read_json",
           "save_state_dict", "write_eval_plot"]
