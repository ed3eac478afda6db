"""Multi-turn agent rollouts: the policy calls tools in Gymnasium envs, observations come back as tokens.

Each of the R = tasks x G rows is one episode. The policy decodes until its end-of-turn token; the action
text goes to the row's environment (tool calls run in the sandbox on host threads); the observation is
appended as the chat template's tool turn and decoding continues from the cached prefix. Token in, token
out: the policy's ids are kept as sampled, only the environment's text is tokenised.
"""
import concurrent.futures
import dataclasses
import functools
import time

import numpy as np

from rlpt.fleet import current
from rlpt.rewards.verdict import Verdict
from rlpt.rollout.format import (
    expand_image_markers,
    observation_ids,
    observation_parts,
    policy_vision,
    prompt_ids,
    response_text,
)
from rlpt.rollout.single_turn import Trajectories, prefix_cache
from rlpt.sampling import continue_generation, generate
from rlpt.sampling.methods import SamplingParams

CODE_AGENT = "rlpt/CodeAgent-v0"
STATUSES = ("running", "done", "turn_limit", "budget", "timeout", "error")


@dataclasses.dataclass
class Episode:
    """One row in progress. tokens: everything after the prompt; policy: 1 on tokens the policy sampled.

    spans: (kind, start, end) in response coordinates, kind 'policy' or 'tool'. status: one of STATUSES.
    """

    env: object
    deadline: float
    tokens: list = dataclasses.field(default_factory=list)
    policy: list = dataclasses.field(default_factory=list)
    logp: list = dataclasses.field(default_factory=list)
    spans: list = dataclasses.field(default_factory=list)
    reward: float = 0.0
    passed: bool = False
    tool_calls: int = 0
    turns: int = 0
    status: str = "running"
    error: str | None = None
    pending: object = None  # an env call still running after its deadline (the env closes when it ends)
    verdict: dict | None = None  # the environment's final info["verdict"] (score, passed, details)
    images: list = dataclasses.field(default_factory=list)  # pixel_values of the observations' images, in order

    def add(self, kind: str, ids, logp=None):
        start = len(self.tokens)
        self.tokens.extend(int(t) for t in ids)
        self.policy.extend([1.0 if kind == "policy" else 0.0] * len(ids))
        self.logp.extend(np.zeros(len(ids)) if logp is None else logp)
        self.spans.append((kind, start, len(self.tokens)))

    def end(self, status: str, error: str | None = None):
        self.status, self.error = status, error


def env_task(task):
    """The task as its environment reads it: rlpt.tasks code domains keep hidden tests in meta['test'],
    CodeAgent reads meta['tests']."""
    if task.env_id == CODE_AGENT and "tests" not in task.meta and "test" in task.meta:
        return dataclasses.replace(task, meta={**task.meta, "tests": task.meta["test"]})
    return task


def default_env(task, *, max_turns: int, time_limit_s: float, obs_budget: int, count_tokens):
    """A fresh environment for one episode; its step limit is the turn limit (it grades at the limit)."""
    import gymnasium as gym

    from rlpt import envs  # noqa: F401  (registers the rlpt/* ids)

    return gym.make(task.env_id, max_steps=max_turns, time_limit_s=time_limit_s, obs_budget=obs_budget,
                    count_tokens=count_tokens)


def env_factory(tok, rcfg, max_turns: int):
    """make_env(task) -> a fresh env for one episode: `default_env` here, or in the fleet's EnvHost actors
    (fleet=ray with fleet.envs)."""
    env_kwargs = dict(time_limit_s=rcfg.episode_timeout_s, obs_budget=observation_budget(tok, rcfg),
                      count_tokens=lambda s: len(tok.encode(s)))
    hosts = current().envs
    if hosts is not None:
        return hosts.factory(max_steps=max_turns, **env_kwargs)
    return functools.partial(default_env, max_turns=max_turns, **env_kwargs)


def observation_budget(tok, rcfg) -> int:
    """Tokens an observation's text may take: the first one must fit rl.rollout.max_prompt_len with its template."""
    budget = rcfg.max_prompt_len - len(prompt_ids(tok, ""))
    if budget < 1:
        raise ValueError(f"rl.rollout.max_prompt_len={rcfg.max_prompt_len} leaves no room for an observation")
    return budget


def _executed(info: dict) -> int:
    """Tool calls the environment dispatched and ran (malformed or schema-invalid calls are not counted)."""
    return sum(1 for c in info.get("calls", []) if "name" in c and "error" not in c)


def _step_all(pool, eps, rows, actions):
    """env.step for each row on host threads, each bounded by its episode's deadline; a crash scores 0."""
    futures = {r: pool.submit(eps[r].env.step, actions[r]) for r in rows}
    for r, fut in futures.items():
        ep = eps[r]
        try:
            obs, reward, terminated, truncated, info = fut.result(timeout=max(ep.deadline - time.monotonic(), 0))
        except concurrent.futures.TimeoutError:
            ep.pending = fut
            ep.end("timeout", "episode deadline passed during a tool call")
            continue
        except Exception as e:  # noqa: BLE001  (a broken sandbox or verifier scores 0; the run goes on)
            ep.end("error", f"{type(e).__name__}: {e}")
            continue
        ep.tool_calls += _executed(info)
        ep.reward += float(reward)
        if terminated or truncated:
            verdict = info.get("verdict", {})
            ep.passed = bool(verdict.get("passed", ep.reward >= 1.0))
            ep.verdict = verdict or None
            ep.end("done" if terminated else "turn_limit")
        else:
            yield r, obs


def start_episodes(pool, eps, rows, start, task_ids, G) -> list:
    """start(r) -> the env's first observation (make the env and reset it; None: nothing to compare, e.g. an episode
    restored mid-way) for each of `rows` on host threads, each bounded by its episode's deadline; a timeout or a
    crash ends that episode (it scores 0). Returns per group of G rows the observation its episodes start from
    (None where none came back); ValueError if a group's differ (its episodes share one prompt)."""
    futures = {r: pool.submit(start, r) for r in rows}
    first = [None] * len(task_ids)
    for r, fut in futures.items():
        try:
            obs = fut.result(timeout=max(eps[r].deadline - time.monotonic(), 0))
        except concurrent.futures.TimeoutError:
            eps[r].pending = fut
            eps[r].end("timeout", "episode deadline passed during reset")
            continue
        except Exception as e:  # noqa: BLE001  (a sandbox that fails to start: the episode scores 0)
            eps[r].end("error", f"reset: {type(e).__name__}: {e}")
            continue
        if obs is None:
            continue
        if first[r // G] is None:
            first[r // G] = obs
        elif not same_observation(obs, first[r // G]):
            raise ValueError(f"task {task_ids[r // G]}: episodes of one group start from different observations; "
                             "a group shares one prompt (make the env's reset deterministic)")
    return first


def take_turns(tok, gen, eps, rows, gen_rows=None) -> dict:
    """Append each row's newly sampled turn (row r is generation row gen_rows[i], default r itself) to its
    episode and end it on the token budget or its deadline; returns {row: action text} for the envs."""
    actions = {}
    for i, r in enumerate(rows):
        g = r if gen_rows is None else gen_rows[i]
        ep, n = eps[r], int(gen.lengths[g])
        ep.add("policy", gen.tokens[g, :n], gen.logprobs[g, :n])
        ep.turns += 1
        if gen.finish_reason[g] != "stop":
            ep.end("budget")
        elif time.monotonic() > ep.deadline:
            ep.end("timeout", "episode deadline passed during generation")
        else:
            actions[r] = response_text(tok, gen.tokens[g, :n])
    return actions


def observe(tok, pool, eps, actions, task_ids, N, max_turns, vision=None):
    """Run the actions in the rows' envs and append each observation as a tool turn; returns per row (appended ids
    or None for a row that ended, the token room left, the observation's pixel values or None)."""
    appended, limits, new_images = [None] * len(eps), np.ones(len(eps), np.int32), [None] * len(eps)
    for r, obs in _step_all(pool, eps, list(actions), actions):
        text, px, tiles = observation_parts(obs, vision, f"task {task_ids[r]} turn {eps[r].turns}")
        ids = observation_ids(tok, text)
        if px is not None:
            ids = expand_image_markers(tok, ids, vision, len(tiles), tiles)
        room = N - len(eps[r].tokens) - len(ids)
        if eps[r].turns >= max_turns:
            eps[r].end("turn_limit")  # a custom env without its own step limit
        elif room < 1:
            eps[r].end("budget")
        else:
            eps[r].add("tool", ids)
            appended[r], limits[r] = ids, room
            if px is not None:
                eps[r].images.append(px)
                new_images[r] = px
    return appended, limits, new_images


def rollout(model, tok, tasks, rcfg, *, seed: int, version: int, max_turns: int, make_env=None,
            workers: int = 8, row_offset: int = 0) -> Trajectories:
    """rcfg.group_size episodes per task, at most max_turns policy turns and rcfg.max_new_tokens tokens
    (policy and tool) after the prompt each, cut at rcfg.episode_timeout_s. make_env(task) -> gymnasium env
    (default: `default_env`). Rewards are the environments' (a cut or crashed episode scores 0). row_offset: the
    global id of the first episode (a process's share of a step, `rlpt.sampling.generate`): it seeds the
    environments and the sampler's rows as in one process."""

    G, N = rcfg.group_size, rcfg.max_new_tokens
    if max_turns < 1:
        raise ValueError(f"max_turns={max_turns}; expected >= 1")
    if make_env is None:
        make_env = env_factory(tok, rcfg, max_turns)
    vision = policy_vision(model)  # a VisionLanguageModel: observations may hold images
    stops = tuple(tok.eos_ids)
    sampling = dict(sampling=SamplingParams.of(rcfg), stop_ids=stops, quant=rcfg.quant, quant_group=rcfg.quant_group,
                    kv_cache_dtype=rcfg.kv_cache_dtype)
    prefix = prefix_cache(rcfg)
    tasks_env = [env_task(t) for t in tasks]
    pool = concurrent.futures.ThreadPoolExecutor(max(1, min(workers, len(tasks) * G)), "episode")
    gen_s = env_s = 0.0
    t0 = time.monotonic()
    eps = [Episode(env=None, deadline=t0 + rcfg.episode_timeout_s) for _ in range(len(tasks) * G)]
    try:
        def start(r):
            eps[r].env = make_env(tasks_env[r // G])
            return eps[r].env.reset(seed=seed + row_offset + r, options={"task": tasks_env[r // G]})[0]

        first = start_episodes(pool, eps, range(len(eps)), start, [t.id for t in tasks], G)
        prompts, pixels = [], []
        for i, t in enumerate(tasks):
            # The G episodes of a task start from one observation, so they share one prefill.
            if first[i] is not None and not isinstance(first[i], str | list):  # text and images
                text, px, tiles = observation_parts(first[i], vision, f"task {t.id} reset")
                ids = prompt_ids(tok, text, vision if px is not None else None, tiles)
            else:
                ids, px = prompt_ids(tok, first[i] if first[i] is not None else t.prompt), None
            if vision is not None:
                px = np.zeros((0, vision.num_channels, vision.image_size, vision.image_size), np.float32) \
                    if px is None else px
                pixels.append(px)
                for r in range(i * G, (i + 1) * G):
                    eps[r].images.append(px)
            if len(ids) > rcfg.max_prompt_len:
                raise ValueError(f"task {t.id}: first observation of {len(ids)} tokens exceeds "
                                 f"rl.rollout.max_prompt_len={rcfg.max_prompt_len}")
            prompts.append(ids)
        env_s += time.monotonic() - t0
        # Cache: prompt bucket + the episode budget, plus room for one padded feed past a full row.
        cache_len = max(len(p) for p in prompts) + 2 * N + 8
        t1 = time.monotonic()
        images = {} if vision is None else {"images": np.concatenate(pixels)}
        gen = generate(model, prompts, N, n=G, seed=seed, max_cache_len=cache_len, row_offset=row_offset,
                       prefix_cache=prefix, **sampling, **images)
        gen_s += time.monotonic() - t1
        turn_rows = [r for r, ep in enumerate(eps) if ep.status == "running"]
        task_ids = [t.id for t in tasks for _ in range(G)]
        while True:
            actions = take_turns(tok, gen, eps, turn_rows)
            t1 = time.monotonic()
            appended, limits, new_images = observe(tok, pool, eps, actions, task_ids, N, max_turns, vision)
            env_s += time.monotonic() - t1
            turn_rows = [r for r, a in enumerate(appended) if a is not None]
            if not turn_rows:
                break
            t1 = time.monotonic()
            fresh = [px for px in new_images if px is not None]  # in row order, as continue_generation reads them
            more = {"images": np.concatenate(fresh)} if fresh else {}
            gen = continue_generation(model, gen, appended, limits, **sampling, **more)
            gen_s += time.monotonic() - t1
    finally:
        close_envs(eps)
        pool.shutdown(wait=False, cancel_futures=True)
    return _trajectories(tok, tasks, prompts, eps, G, N, version, gen_s, env_s, prefix)


def close_envs(eps) -> None:
    """Close the episodes' envs; one whose call stalled past its deadline closes once that call returns."""
    for ep in eps:
        if ep.pending is not None:
            ep.pending.add_done_callback(lambda _f, ep=ep: ep.env.close() if ep.env is not None else None)
        elif ep.env is not None:
            try:
                ep.env.close()
            except Exception:  # noqa: BLE001,S110  (closing a crashed env must not hide the real error)
                pass


def same_observation(a, b) -> bool:
    """Equal observations: text as ==, dict observations key by key with images compared as arrays."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(
            np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a)
    return a == b


def episode_verdict(ep: Episode):
    """The episode's outcome as a Verdict for the reward mixture: the environment's final verdict (process
    credit = the outcome where the env reports none); an episode cut or crashed before one scores 0."""

    if ep.status not in ("done", "turn_limit"):
        return Verdict(0.0, False, {"error": ep.status, "process": 0.0})
    if ep.verdict is None:  # an env without a verifier verdict: its summed reward is the outcome
        score = min(max(ep.reward, 0.0), 1.0)
        return Verdict(score, ep.passed, {"process": score})
    details = dict(ep.verdict.get("details", {}))
    details.setdefault("process", float(ep.verdict["score"]))
    return Verdict(float(ep.verdict["score"]), bool(ep.verdict["passed"]), details)


def policy_text(tok, ep: Episode) -> str:
    """The policy's own turns as text (tool output left out), what text-based reward components score."""
    return "\n".join(response_text(tok, ep.tokens[s:e]) for kind, s, e in ep.spans if kind == "policy")


def _trajectories(tok, tasks, prompts, eps, G, N, version, gen_s, env_s, prefix=None) -> Trajectories:
    R = len(eps)
    response = np.zeros((R, N), np.int32)
    logp, mask = np.zeros((R, N), np.float32), np.zeros((R, N), np.float32)
    for r, ep in enumerate(eps):
        n = len(ep.tokens)
        response[r, :n], logp[r, :n], mask[r, :n] = ep.tokens, ep.logp, ep.policy
    for ep in eps:
        if ep.status != "done" and ep.status != "turn_limit":
            ep.reward, ep.passed = 0.0, False
    return Trajectories(
        tasks=tasks, prompts=[p for p in prompts for _ in range(G)], response=response,
        lengths=np.asarray([len(ep.tokens) for ep in eps], np.int32), rollout_logp=logp,
        rewards=np.asarray([ep.reward for ep in eps], np.float32), passed=np.asarray([ep.passed for ep in eps]),
        group_ids=np.repeat(np.arange(len(tasks)), G), truncated=np.asarray([ep.status == "budget" for ep in eps]),
        version=version, gen_s=gen_s, verify_s=env_s,
        texts=[tok.decode(ep.tokens) + (f"\n[{ep.status}: {ep.error}]" if ep.error else "") for ep in eps],
        policy_mask=mask, turns=np.asarray([ep.turns for ep in eps], np.int32),
        tool_calls=np.asarray([ep.tool_calls for ep in eps], np.int32), spans=[ep.spans for ep in eps],
        status=[ep.status for ep in eps], verdicts=[episode_verdict(ep) for ep in eps],
        reward_texts=[policy_text(tok, ep) for ep in eps],
        prefix_stats=prefix.stats() if prefix is not None else None,
        images=[np.concatenate(ep.images) for ep in eps] if eps and eps[0].images else None)
