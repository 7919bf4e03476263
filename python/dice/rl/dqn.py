"""DQN in torch (Mnih et al. 2015) with double DQN, n-step targets, a hard
target update, Huber loss, gradient clipping and Adam: the defaults of
dice's C++ dice::rl::dqn_options, which solve CartPole-v1.

    net = q_network(4, 2, (64, 64), seed=0)
    learner = DQNLearner(net)
    learner.add(batch)                # a transition batch (dice.rl.replay)
    if learner.ready():
        loss = learner.update()
"""

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F


def q_network(obs_dim, num_actions, hidden=(64, 64), seed=0):
    """MLP obs_dim -> hidden... -> num_actions with ReLU as nn.Sequential
    (names 0.weight, 2.weight, ... like dice's C++ q_network), its weights
    drawn from `seed` (torch's default init, so every node agrees)."""
    rng = np.random.default_rng(seed)
    layers, width = [], int(obs_dim)
    for h in list(hidden) + [int(num_actions)]:
        layer = torch.nn.Linear(width, int(h))
        bound = 1.0 / math.sqrt(width)
        with torch.no_grad():
            w = rng.uniform(-bound, bound, (int(h), width))
            layer.weight.copy_(torch.from_numpy(w.astype(np.float32)))
            layer.bias.copy_(torch.from_numpy(
                rng.uniform(-bound, bound, int(h)).astype(np.float32)))
        layers += [layer, torch.nn.ReLU()]
        width = int(h)
    return torch.nn.Sequential(*layers[:-1])


def linear_epsilon(start=1.0, end=0.05, decay_steps=10000):
    """Epsilon as a function of env steps: start, falling linearly to end
    over decay_steps (always end when decay_steps <= 0)."""

    def at(env_steps):
        if decay_steps <= 0:
            return end
        return start + min(1.0, env_steps / decay_steps) * (end - start)

    return at


def q_values(net, obs):
    """Q(obs, .) for observations [B, D] without autograd (tensor [B, A])."""
    with torch.no_grad():
        return net(torch.as_tensor(np.asarray(obs, np.float32)))


def greedy_actions(net, obs):
    """argmax_a Q(obs, a) for observations [B, D] (numpy int64 [B])."""
    return q_values(net, obs).argmax(1).numpy()


def epsilon_greedy(net, obs, epsilon, rng):
    """Greedy actions, each replaced with probability epsilon by a uniform
    random one drawn from the numpy Generator rng."""
    q = q_values(net, obs)
    actions = q.argmax(1).numpy()
    explore = rng.random(len(actions)) < epsilon
    if explore.any():
        actions[explore] = rng.integers(0, q.shape[1], int(explore.sum()))
    return actions


def play_greedy(net, make_envs, episodes, seed):
    """Returns of `episodes` greedy episodes, played as one batch of
    make_envs(episodes, seed) (a vector env such as CartPoleVecEnv)."""
    envs = make_envs(episodes, seed)
    obs = envs.obs
    returns = np.zeros(episodes)
    done = np.zeros(episodes, dtype=bool)
    while not done.all():
        obs, reward, terminated, truncated, _ = envs.step(
            greedy_actions(net, obs))
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    return returns.tolist()


def add_dqn_options(parser):
    """Adds DQN's hyper-parameters to an argparse parser, with the defaults
    of dice's C++ dqn_options (--hidden, --lr, --batch-size, --gamma,
    --nstep, --learning-starts, --updates-per-step, --target-update-every,
    --epsilon-decay); returns the parser."""
    g = parser.add_argument_group("DQN")
    a = g.add_argument
    a("--hidden", default="64,64", help="widths of the hidden layers")
    a("--lr", type=float, default=1e-3, help="Adam's learning rate")
    a("--batch-size", type=int, default=64, help="samples per gradient step")
    a("--gamma", type=float, default=0.99, help="discount factor")
    a("--nstep", type=int, default=3, help="steps summed into a TD target")
    a("--learning-starts", type=int, default=1000,
      help="transitions in the replay buffer before the first update")
    a("--updates-per-step", type=float, default=0.5,
      help="gradient steps per transition that reaches the learner")
    a("--target-update-every", type=int, default=250,
      help="gradient steps between hard target updates")
    a("--epsilon-decay", type=float, default=10000,
      help="env steps (all collectors) over which epsilon falls 1 -> 0.05")
    return parser


def hidden_sizes(opts):
    """The --hidden widths ("64,64") as a list of ints."""
    return [int(h) for h in str(opts.hidden).split(",") if h.strip()]


class DQNLearner:
    """The online net (trained in place), its target copy, Adam and a
    uniform replay buffer; update() takes one gradient step."""

    def __init__(self, net, lr=1e-3, batch_size=64, capacity=50000,
                 learning_starts=1000, target_update_every=250,
                 double_dqn=True, grad_clip=10.0, seed=0):
        from .replay import ReplayBuffer
        self.online = net
        self.target = copy.deepcopy(net).requires_grad_(False)
        self.opt = torch.optim.Adam(net.parameters(), lr=lr)
        self.buffer = ReplayBuffer(capacity, seed=seed)
        self.batch_size = int(batch_size)
        self.learning_starts = int(learning_starts)
        self.target_update_every = int(target_update_every)
        self.double_dqn = bool(double_dqn)
        self.grad_clip = float(grad_clip)
        self.updates = 0

    @classmethod
    def from_options(cls, net, opts, seed=0):
        """A learner with add_dqn_options' settings (argparse namespace)."""
        return cls(net, lr=opts.lr, batch_size=opts.batch_size,
                   learning_starts=opts.learning_starts,
                   target_update_every=opts.target_update_every, seed=seed)

    def add(self, batch):
        """Adds a transition batch to the replay buffer; returns its size."""
        return self.buffer.add(batch)

    def ready(self):
        """True once the buffer holds learning_starts transitions."""
        return len(self.buffer) >= max(self.learning_starts, 1)

    def update(self):
        """One gradient step on a sampled batch; returns the loss (a
        0-d tensor: .item() it when needed)."""
        b = self.buffer.sample(self.batch_size)
        n = self.batch_size
        # One pass of the online net over obs and next_obs.
        q_all = self.online(torch.cat([b["obs"], b["next_obs"]]))
        q = q_all[:n].gather(1, b["action"].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q = self.target(b["next_obs"])
            best = (q_all[n:] if self.double_dqn else next_q).argmax(1)
            y = b["reward"] + b["discount"] * next_q.gather(
                1, best.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.online.parameters(),
                                           self.grad_clip)
        self.opt.step()
        self.updates += 1
        if self.updates % self.target_update_every == 0:
            self.target.load_state_dict(self.online.state_dict())
        return loss.detach()


__all__ = ["q_network", "add_dqn_options", "hidden_sizes", "linear_epsilon",
           "q_values", "greedy_actions", "epsilon_greedy", "play_greedy",
           "DQNLearner"]
