"""Environments in numpy: Gymnasium's CartPole-v1, alone and vectorised.

Same dynamics as Gymnasium's CartPole-v1 (and dice's C++ dice::envs::cartpole):
Euler integration, reward 1 per step (the last one included), termination
at |x| > 2.4 or |theta| > 12 degrees, truncation after 500 steps, start
states uniform in [-0.05, 0.05]. The state is float64, observations float32.

    env = CartPoleEnv()
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(1)

    envs = CartPoleVecEnv(8, seed=0)   # reset at once; ended envs reset
    obs = envs.obs                     # [8, 4]
    obs, reward, terminated, truncated, info = envs.step(actions)
    info["final_obs"], info["episode_return"]
"""

import math

import numpy as np

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
LENGTH = 0.5  # half the pole's length
FORCE_MAG = 10.0
TAU = 0.02  # seconds per step
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_EPISODE_STEPS = 500

_TOTAL_MASS = MASSPOLE + MASSCART
_POLEMASS_LENGTH = MASSPOLE * LENGTH


def cartpole_dynamics(state, action):
    """One Euler step of states [..., 4] (x, x_dot, theta, theta_dot) under
    actions (1 pushes right, 0 left); returns the new states."""
    state = np.asarray(state, dtype=np.float64)
    x, x_dot, theta, theta_dot = np.moveaxis(state, -1, 0)
    force = np.where(np.asarray(action) == 1, FORCE_MAG, -FORCE_MAG)
    costheta = np.cos(theta)
    sintheta = np.sin(theta)
    temp = (force + _POLEMASS_LENGTH * theta_dot**2 * sintheta) / _TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / _TOTAL_MASS))
    xacc = temp - _POLEMASS_LENGTH * thetaacc * costheta / _TOTAL_MASS
    # Positions move with the old velocities (Gymnasium's "euler").
    return np.stack([x + TAU * x_dot, x_dot + TAU * xacc,
                     theta + TAU * theta_dot, theta_dot + TAU * thetaacc],
                    axis=-1)


def cartpole_terminated(state):
    """True where the cart left [-2.4, 2.4] or the pole fell past 12 deg."""
    state = np.asarray(state)
    return ((np.abs(state[..., 0]) > X_THRESHOLD)
            | (np.abs(state[..., 2]) > THETA_THRESHOLD))


class CartPoleEnv:
    """CartPole-v1 with Gymnasium's API (reset -> obs, info; step -> obs,
    reward, terminated, truncated, info), 500-step limit included."""

    obs_dim = 4
    num_actions = 2
    max_episode_steps = MAX_EPISODE_STEPS

    def __init__(self, seed=None):
        self._rng = np.random.default_rng(seed)
        self.state = np.zeros(4)
        self.elapsed = 0

    def reset(self, seed=None):
        """Starts an episode (reseeded when seed is given)."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.state = self._rng.uniform(-0.05, 0.05, size=4)
        self.elapsed = 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        """Pushes the cart (1: right, 0: left) for one 0.02 s step."""
        self.state = cartpole_dynamics(self.state, int(action))
        self.elapsed += 1
        terminated = bool(cartpole_terminated(self.state))
        truncated = not terminated and self.elapsed >= MAX_EPISODE_STEPS
        return self.state.astype(np.float32), 1.0, terminated, truncated, {}


class CartPoleVecEnv:
    """`num_envs` CartPole-v1 envs stepped as one batch; an env whose
    episode ended starts the next one at once (Gymnasium's autoreset)."""

    obs_dim = 4
    num_actions = 2
    max_episode_steps = MAX_EPISODE_STEPS

    def __init__(self, num_envs, seed=None):
        self.num_envs = int(num_envs)
        if self.num_envs < 1:
            raise ValueError("CartPoleVecEnv needs at least one env")
        self.reset(seed)

    def reset(self, seed=None):
        """Starts every env's episode (reseeded when seed is given);
        returns the observations [num_envs, 4]."""
        if seed is not None or not hasattr(self, "_rng"):
            self._rng = np.random.default_rng(seed)
        self.state = self._rng.uniform(-0.05, 0.05, size=(self.num_envs, 4))
        self.elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self.returns = np.zeros(self.num_envs)
        return self.obs

    @property
    def obs(self):
        """The current observations [num_envs, 4] (float32)."""
        return self.state.astype(np.float32)

    def step(self, actions):
        """Steps every env; returns obs (after autoreset), rewards,
        terminated, truncated and info: final_obs (before the reset),
        episode_return and episode_length of the episodes that ended."""
        self.state = cartpole_dynamics(self.state, np.asarray(actions))
        self.elapsed += 1
        self.returns += 1.0
        reward = np.ones(self.num_envs, dtype=np.float32)
        terminated = cartpole_terminated(self.state)
        truncated = ~terminated & (self.elapsed >= MAX_EPISODE_STEPS)
        final_obs = self.state.astype(np.float32)
        done = terminated | truncated
        info = {"final_obs": final_obs,
                "episode_return": self.returns[done].copy(),
                "episode_length": self.elapsed[done].copy()}
        if done.any():
            self.state[done] = self._rng.uniform(-0.05, 0.05,
                                                 size=(int(done.sum()), 4))
            self.elapsed[done] = 0
            self.returns[done] = 0.0
        return self.obs, reward, terminated, truncated, info


__all__ = ["CartPoleEnv", "CartPoleVecEnv", "cartpole_dynamics",
           "cartpole_terminated", "MAX_EPISODE_STEPS"]
