"""Transitions for off-policy learning: n-step transitions from a batch of
envs (what a collector sends, as one dict of stacked numpy arrays) and a
uniform replay buffer of torch tensors (what a learner samples).

A transition batch is a dict of equally long arrays: obs [N, D] float32,
action [N] int64, reward [N] float32 (the discounted n-step sum), next_obs
[N, D] float32 and discount [N] float32 (gamma**k, 0 after a termination),
so the TD target is reward + discount * max_a Q(next_obs, a).
"""

import collections

import numpy as np
import torch

FIELDS = ("obs", "action", "reward", "next_obs", "discount")


class NStep:
    """Turns the steps of `num_envs` envs stepped together into n-step
    transitions; a truncated episode bootstraps from its final obs."""

    def __init__(self, num_envs, n=3, gamma=0.99):
        if n < 1:
            raise ValueError("NStep needs n >= 1")
        self.n, self.gamma = int(n), float(gamma)
        self._pending = [collections.deque() for _ in range(int(num_envs))]
        self._out = {k: [] for k in FIELDS}
        self._dim = 0

    def _emit(self, steps, next_obs, terminated):
        ret = 0.0
        for k, (_, _, r) in enumerate(steps):
            ret += self.gamma**k * r
        obs, action, _ = steps[0]
        out = self._out
        out["obs"].append(obs)
        out["action"].append(action)
        out["reward"].append(ret)
        out["next_obs"].append(next_obs)
        out["discount"].append(0.0 if terminated else self.gamma**len(steps))

    def add(self, obs, action, reward, final_obs, terminated, truncated):
        """Adds one step of every env: obs before it, actions, rewards, the
        obs after it (before any autoreset), terminated and truncated."""
        self._dim = len(obs[0])
        for i, pending in enumerate(self._pending):
            pending.append((obs[i], int(action[i]), float(reward[i])))
            if terminated[i] or truncated[i]:
                while pending:
                    self._emit(pending, final_obs[i], bool(terminated[i]))
                    pending.popleft()
            elif len(pending) == self.n:
                self._emit(pending, final_obs[i], False)
                pending.popleft()

    def __len__(self):
        return len(self._out["action"])

    def take(self):
        """The finished transitions as one dict of stacked arrays (emptied)."""
        out, self._out = self._out, {k: [] for k in FIELDS}
        dim = self._dim
        f32 = np.float32
        return {
            "obs": np.asarray(out["obs"], f32).reshape(-1, dim),
            "action": np.asarray(out["action"], np.int64),
            "reward": np.asarray(out["reward"], f32),
            "next_obs": np.asarray(out["next_obs"], f32).reshape(-1, dim),
            "discount": np.asarray(out["discount"], f32),
        }


class ReplayBuffer:
    """Uniform replay: a ring of `capacity` transitions in preallocated
    torch tensors, laid out by the first batch added."""

    def __init__(self, capacity=50000, seed=0, fields=FIELDS):
        self.capacity = int(capacity)
        self.fields = tuple(fields)
        self._data = None
        self._next = 0
        self._size = 0
        self.added = 0
        self._gen = torch.Generator().manual_seed(int(seed))

    def __len__(self):
        return self._size

    def add(self, batch):
        """Appends a transition batch (dict of arrays); returns its size."""
        cols = {k: torch.as_tensor(np.asarray(batch[k])) for k in self.fields}
        n = len(cols[self.fields[0]])
        if any(len(c) != n for c in cols.values()):
            raise ValueError("a transition batch needs equally long fields")
        if n == 0:
            return 0
        if self._data is None:
            self._data = {k: torch.zeros((self.capacity,) + tuple(c.shape[1:]),
                                         dtype=c.dtype)
                          for k, c in cols.items()}
        if n > self.capacity:
            cols = {k: c[-self.capacity:] for k, c in cols.items()}
            n = self.capacity
        first = min(n, self.capacity - self._next)
        for k, c in cols.items():
            self._data[k][self._next:self._next + first] = c[:first]
            self._data[k][:n - first] = c[first:]
        self._next = (self._next + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        self.added += n
        return n

    def sample(self, batch_size):
        """batch_size transitions drawn uniformly (with replacement)."""
        if self._size == 0:
            raise ValueError("sample from an empty replay buffer")
        idx = torch.randint(0, self._size, (int(batch_size),),
                            generator=self._gen)
        return {k: t[idx] for k, t in self._data.items()}


__all__ = ["NStep", "ReplayBuffer", "FIELDS"]
