"""Partial rollouts for multi-turn agents (rl.rollout.partial): a step ends once prompts_per_step groups have
finished, and the episodes still running are paused and continued in later steps (APRIL-style over-provisioning).

Each step runs the groups carried from earlier steps plus new tasks, so that prompts_per_step + extra_groups
groups are in flight. After every turn (all running episodes sample one turn; their tool calls run) the step
stops if prompts_per_step groups have ended and no group is `max_lag` steps old; the oldest finished groups
form the batch. A paused episode keeps its tokens, the log-probs they were sampled with (the PPO ratio's
denominator, so tokens from older policies are importance-weighted against the current one), its counters
and its env's state (the workspace's files: `envs.base.TextEnv.episode_state`).

Exactness: the groups in flight are kept only in their saved form (JSON: what the run's checkpoint holds).
Every step rebuilds the paused episodes from it (a fresh env reset with the episode's seed, then
restore_episode; a fresh prefill of prompt + tokens so far), so a run resumed from a checkpoint continues every
episode exactly as the run that was never stopped does.
"""
import base64
import concurrent.futures
import json
import math
import pickle
import threading
import time

import jax
import numpy as np

from rlpt.fleet import current
from rlpt.rollout.format import policy_vision, prompt_ids
from rlpt.rollout.multi_turn import (
    Episode,
    _trajectories,
    close_envs,
    env_factory,
    env_task,
    observe,
    start_episodes,
    take_turns,
)
from rlpt.sampling import continue_generation, generate
from rlpt.sampling.methods import SamplingParams

_KEPT = 8  # saved states kept per step: a checkpoint asks for the step just trained (async runs ahead by lag)


def _env_of(env):
    """The object that holds episode_state / restore_episode (a Gymnasium env under its wrappers)."""
    inner = getattr(env, "unwrapped", env)
    if not hasattr(inner, "episode_state"):
        raise ValueError(f"{type(inner).__name__} cannot pause an episode (no episode_state / restore_episode); "
                         "set rl.rollout.partial.enabled=false")
    return inner


def _pack_task(task) -> str:
    return base64.b64encode(pickle.dumps(task)).decode("ascii")


def _unpack_task(text: str):
    return pickle.loads(base64.b64decode(text))  # noqa: S301  (the run's own checkpoint)


class PartialRollout:
    """A stateful rollout_fn for `run_rl`: the producer asks `tasks_wanted()` before drawing a step's tasks and
    passes `step`; `state_at(step)` is what a checkpoint written after that step keeps, `load(state, step)`
    brings it back on resume."""

    stateful = True

    def __init__(self, rcfg, *, max_turns: int, make_env=None, workers: int = 8):
        p = rcfg.partial
        self.P, self.G, self.extra, self.max_lag = rcfg.prompts_per_step, rcfg.group_size, p.extra_groups, p.max_lag
        # a group forced to finish at max_lag may wait for older finished ones: at most ceil(extra / P) steps
        self.bound = p.max_lag + math.ceil(p.extra_groups / rcfg.prompts_per_step)
        self.max_turns, self.make_env, self.workers = max_turns, make_env, workers
        self.carried: list[dict] = []  # the groups in flight after the last step, saved form
        self.saved: dict[int, list] = {0: []}
        self.lock = threading.Lock()

    def tasks_wanted(self) -> int:
        return self.P + self.extra - len(self.carried)

    def state_at(self, step: int) -> list:
        with self.lock:
            if step not in self.saved:
                raise RuntimeError(f"partial rollouts: no saved episodes for step {step} (have {sorted(self.saved)})")
            return self.saved[step]

    def load(self, state, step: int) -> None:
        if state is None:
            raise ValueError("the checkpoint holds no paused episodes (it was written with "
                             "rl.rollout.partial.enabled=false); resume with that setting or a new out_dir")
        self.carried = state
        self.saved = {step: state}

    def __call__(self, model, tok, tasks, rcfg, *, seed: int, version: int, step: int, row_offset: int = 0):
        if row_offset or jax.process_count() > 1:
            raise ValueError("rl.rollout.partial.enabled=true runs in one process (its paused episodes are "
                             "one process's); set it false for a multi-process run")
        if self.make_env is None and current().envs is not None:
            raise ValueError("rl.rollout.partial.enabled=true does not combine with fleet.envs (remote envs cannot "
                             "save an episode yet); set one of them off")
        if policy_vision(model) is not None:
            raise ValueError("rl.rollout.partial.enabled=true does not combine with model.vision yet")
        G, N = self.G, rcfg.max_new_tokens
        make_env = self.make_env or env_factory(tok, rcfg, self.max_turns)
        groups = [_unpack(g) for g in json.loads(json.dumps(self.carried))]
        for i, t in enumerate(tasks):
            groups.append({"task": t, "prompt": None, "step": step, "version": version, "env": [None] * G,
                           "seeds": [seed + i * G + j for j in range(G)],
                           "eps": [Episode(None, 0.0) for _ in range(G)]})
        eps = [ep for g in groups for ep in g["eps"]]
        pool = concurrent.futures.ThreadPoolExecutor(max(1, min(self.workers, len(eps))), "episode")
        t0 = time.monotonic()
        sampling = dict(sampling=SamplingParams.of(rcfg), stop_ids=tuple(tok.eos_ids), quant=rcfg.quant,
                        quant_group=rcfg.quant_group, kv_cache_dtype=rcfg.kv_cache_dtype)
        gen_s = 0.0
        try:
            for ep in eps:
                ep.deadline = t0 + rcfg.episode_timeout_s  # each step's part of an episode has its own deadline
            self._start(pool, make_env, groups, tok, rcfg)
            env_s = time.monotonic() - t0
            running = [r for r, ep in enumerate(eps) if ep.status == "running"]
            if running and not self._done(groups, step):
                t1 = time.monotonic()
                contexts = [groups[r // G]["prompt"] + eps[r].tokens for r in running]
                gen = generate(model, contexts, [N - len(eps[r].tokens) for r in running], seed=seed,
                               max_cache_len=max(len(g["prompt"]) for g in groups) + 2 * N + 8, **sampling)
                gen_s += time.monotonic() - t1
                turn = list(range(len(running)))  # generation rows with a new turn
                task_ids = [g["task"].id for g in groups for _ in range(G)]
                while True:
                    actions = take_turns(tok, gen, eps, [running[i] for i in turn], turn)
                    t1 = time.monotonic()
                    appended, limits, _ = observe(tok, pool, eps, actions, task_ids, N, self.max_turns)
                    env_s += time.monotonic() - t1
                    turn = [i for i, r in enumerate(running) if appended[r] is not None]
                    if not turn or self._done(groups, step):
                        break
                    t1 = time.monotonic()
                    gen = continue_generation(model, gen, [appended[r] for r in running],
                                              np.asarray([limits[r] for r in running], np.int32), **sampling)
                    gen_s += time.monotonic() - t1
            t1 = time.monotonic()
            out, rest = self._split(groups, step)
            carried = [_pack(g, self._pause(g)) for g in rest]
            env_s += time.monotonic() - t1
        finally:
            close_envs(eps)
            pool.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            self.carried = carried
            self.saved[step] = carried
            for s in sorted(self.saved)[:-_KEPT]:
                del self.saved[s]
        out_eps = [ep for g in out for ep in g["eps"]]
        traj = _trajectories(tok, [g["task"] for g in out], [g["prompt"] for g in out], out_eps, G, N, version,
                             gen_s, env_s)
        traj.row_versions = np.repeat(np.asarray([g["version"] for g in out], np.int32), G)
        return traj

    def _start(self, pool, make_env, groups, tok, rcfg) -> None:
        """Envs for the running episodes: new ones reset (a group's first observation becomes its prompt), paused
        ones reset with their seed and restored. A failure ends that episode with status error (it scores 0)."""
        G = self.G

        def start(r):
            g, j = groups[r // G], r % G
            ep, task = g["eps"][j], env_task(g["task"])
            ep.env = make_env(task)
            obs = ep.env.reset(seed=g["seeds"][j], options={"task": task})[0]
            if not ep.tokens:
                return obs
            _env_of(ep.env).restore_episode(g["env"][j])
            return None  # its group's prompt is known

        eps = [ep for g in groups for ep in g["eps"]]
        rows = [r for r, ep in enumerate(eps) if ep.status == "running"]
        first = start_episodes(pool, eps, rows, start, [g["task"].id for g in groups], G)
        for g, obs in zip(groups, first):
            if g["prompt"] is None:
                if obs is not None and not isinstance(obs, str):
                    raise ValueError(f"task {g['task'].id}: partial rollouts take text observations")
                g["prompt"] = prompt_ids(tok, obs if obs is not None else g["task"].prompt)
                if len(g["prompt"]) > rcfg.max_prompt_len:
                    raise ValueError(f"task {g['task'].id}: first observation of {len(g['prompt'])} tokens exceeds "
                                     f"rl.rollout.max_prompt_len={rcfg.max_prompt_len}")

    def _done(self, groups, step: int) -> bool:
        """Stop the step: prompts_per_step groups have ended and none still running is max_lag steps old."""
        ended = [_ended(g) for g in groups]
        due = any(not e and step - g["step"] >= self.max_lag for g, e in zip(groups, ended))
        return sum(ended) >= self.P and not due

    def _split(self, groups, step: int):
        """(the step's batch: the oldest prompts_per_step ended groups, the groups carried on)."""
        ended = [g for g in groups if _ended(g)][:self.P]
        if len(ended) < self.P:
            raise RuntimeError(f"partial rollouts: {len(ended)} groups ended at step {step}, fewer than "
                               f"rl.rollout.prompts_per_step={self.P}")
        for g in ended:
            if step - g["step"] > self.bound:
                raise AssertionError(f"task {g['task'].id}: started at step {g['step']}, trained at step {step}, "
                                     f"past the bound of {self.bound} steps")
        taken = {id(g) for g in ended}
        return ended, [g for g in groups if id(g) not in taken]

    def _pause(self, g) -> list:
        """Each running episode's env state (None for ended ones); an env that cannot save its state ends the
        episode with status error (it scores 0)."""
        states = []
        for ep in g["eps"]:
            state = None
            if ep.status == "running":
                try:
                    state = _env_of(ep.env).episode_state()
                except Exception as e:  # noqa: BLE001  (this episode scores 0; the run goes on)
                    ep.end("error", f"pause: {type(e).__name__}: {e}")
            states.append(state)
        return states


def _ended(g) -> bool:
    return all(ep.status != "running" for ep in g["eps"])


_EPISODE_FIELDS = ("tokens", "policy", "logp", "spans", "reward", "passed", "tool_calls", "turns", "status", "error",
                   "verdict")


def _pack(g, env_states) -> dict:
    """A group in its saved form (JSON-able; the task pickled). It shares the episodes' lists: the next step reads
    a JSON copy of it (`__call__`), never the lists themselves."""
    eps = []
    for ep in g["eps"]:
        d = {k: getattr(ep, k) for k in _EPISODE_FIELDS}
        d["logp"] = [float(x) for x in d["logp"]]  # numpy float32 -> JSON numbers
        eps.append(d)
    return {"task": _pack_task(g["task"]), "prompt": list(g["prompt"]), "step": g["step"], "version": g["version"],
            "seeds": g["seeds"], "env": env_states, "eps": eps}


def _unpack(d: dict) -> dict:
    eps = []
    for e in d["eps"]:
        ep = Episode(None, 0.0, **{k: e[k] for k in _EPISODE_FIELDS})
        ep.spans = [tuple(s) for s in ep.spans]
        eps.append(ep)
    return {**d, "task": _unpack_task(d["task"]), "eps": eps}
