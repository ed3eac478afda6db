"""Multi-turn environments on the fleet: Gymnasium envs live in Ray actors, the rollout holds `RemoteEnv` handles.

Each `EnvHost` actor keeps many episodes' environments (keyed by an episode id) and runs their tool calls on its
own threads; `RemoteEnv` has the Gymnasium methods the multi-turn rollout calls (reset, step, close), each a call
to the episode's host. Hosts take no CPU reservation (a tool call mostly waits on its sandbox process).
"""

import collections
import itertools
import threading


class EnvHost:
    """A Ray actor holding environments by key."""

    def __init__(self):
        self.envs: dict = {}
        self.lock = threading.Lock()

    def make(self, key: str, env_id: str, kwargs: dict) -> None:
        import gymnasium as gym

        from rlpt import envs  # noqa: F401  (registers the rlpt/* ids)

        env = gym.make(env_id, **kwargs)
        with self.lock:
            self.envs[key] = env

    def reset(self, key: str, seed, options):
        return self.envs[key].reset(seed=seed, options=options)

    def step(self, key: str, action):
        return self.envs[key].step(action)

    def close(self, key: str) -> None:
        with self.lock:
            env = self.envs.pop(key, None)
        if env is not None:
            env.close()

    def count(self) -> int:
        return len(self.envs)


class RemoteEnv:
    """An environment in an EnvHost actor, driven like a local Gymnasium env (reset / step / close)."""

    def __init__(self, host, key: str, env_id: str, kwargs_ref, counts=None):
        import ray

        self.host, self.key, self.counts = host, key, counts
        ray.get(host.make.remote(key, env_id, kwargs_ref))  # a threaded actor: make before anything else
        self._count("env_episodes")

    def _count(self, what: str) -> None:
        if self.counts is not None:
            self.counts(what)

    def reset(self, *, seed=None, options=None):
        import ray

        return ray.get(self.host.reset.remote(self.key, seed, options))

    def step(self, action):
        import ray

        self._count("env_steps")
        return ray.get(self.host.step.remote(self.key, action))

    def close(self) -> None:
        self.host.close.remote(self.key)


class EnvHosts:
    """`n` EnvHost actors; `factory(**kwargs)` gives make_env(task) -> RemoteEnv on them, round robin."""

    def __init__(self, n: int, threads: int = 32):
        import ray

        cls = ray.remote(EnvHost).options(num_cpus=0, max_concurrency=threads, max_restarts=0)
        self.hosts = [cls.remote() for _ in range(n)]
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._counts: collections.Counter = collections.Counter()

    def _count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    def take_counts(self) -> dict[str, int]:
        """Episodes started and steps taken on the hosts since the last call."""
        with self._lock:
            out, self._counts = dict(self._counts), collections.Counter()
        return out

    def factory(self, **kwargs):
        """make_env(task) -> RemoteEnv of gym.make(task.env_id, **kwargs) (kwargs sent to the cluster once)."""
        import ray

        ref = ray.put(kwargs)

        def make_env(task):
            k = next(self._next)
            return RemoteEnv(self.hosts[k % len(self.hosts)], f"{task.id}/{k}", task.env_id, ref, self._count)

        return make_env

    def close(self) -> None:
        import ray

        for h in self.hosts:
            ray.kill(h)
