"""Curricula over (domain, tier): fixed mixture, staged easy-to-hard, adaptive success band, replay pool.

A curriculum is a frozen description plus an explicit state dict of numpy arrays and ints
(checkpointable as is): `init_state() -> state`, `draw(state, step, rng, n) -> [(domain, tier, seed)]`,
`update(state, outcomes) -> state` with outcomes `[(domain, tier, seed, score)]` or
`[(domain, tier, seed, score, failure_tag)]` (rlpt.observe.tags.task_outcomes).

Replay pool (the data flywheel): a task with score < 1 enters a ring of `replay_capacity` slots with its
failure tag (once: a task already in the pool only updates its tag); `replay_fraction` of each batch is
re-drawn from the pool, slot i with weight tag_weight[tag_i] * replay_weight ** attempts_i; a pooled task
that scores 1 again leaves the pool ("solved"). `replay_file` preloads the pool from the tasks.jsonl that
`python -m rlpt.flywheel` writes.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from typing import TYPE_CHECKING

import numpy as np

from rlpt.observe.tags import FAILURE_TAGS
from rlpt.tasks.base import EVAL_SEED_START, Task
from rlpt.tasks.registry import get_domain, resolve

if TYPE_CHECKING:  # rlpt.config pulls in JAX through the model schemas; keep this module light
    from rlpt.config.tasks import CurriculumConfig, DomainsConfig


@dataclasses.dataclass(frozen=True)
class Curriculum:
    """domains: names; tiers[d]: allowed tiers of domain d; weights: domain sampling probabilities."""

    kind: str
    domains: tuple[str, ...]
    tiers: tuple[tuple[int, ...], ...]
    weights: np.ndarray  # (D,)
    cfg: CurriculumConfig

    def init_state(self) -> dict:
        d, t = len(self.domains), max(len(x) for x in self.tiers)
        start = np.array([min(self.cfg.start_tier_index, len(x) - 1) for x in self.tiers], np.int64)
        cap = self.cfg.replay_capacity
        state = {
            "tier_index": start,
            "ema": np.full((d, t), 0.5),
            "count": np.zeros((d, t), np.int64),
            "since_move": np.zeros(d, np.int64),
            "promotions": 0,
            "demotions": 0,
            "replay_domain": np.full(cap, -1, np.int64),
            "replay_tier": np.zeros(cap, np.int64),
            "replay_seed": np.zeros(cap, np.int64),
            "replay_next": 0,
            **_replay_extras(cap),
        }
        if self.cfg.replay_file:
            state = self.update(state, load_replay_file(self.cfg.replay_file))
        return state

    def tier_probs(self, state: dict, step: int, d: int) -> np.ndarray:
        """(len(tiers[d]),) probabilities over the tiers of domain d at this step."""
        n = len(self.tiers[d])
        if self.kind == "fixed":
            w = np.asarray(self.cfg.tier_weights[:n] if self.cfg.tier_weights else np.ones(n), float)
            if len(w) < n:
                w = np.concatenate([w, np.zeros(n - len(w))])
        elif self.kind == "staged":
            top = min(int(np.searchsorted(self.cfg.stage_steps, step, side="right")), n - 1)
            w = np.zeros(n)
            w[max(0, top - self.cfg.window + 1) : top + 1] = 1.0
        else:
            cur = int(state["tier_index"][d])
            w = np.zeros(n)
            w[cur] = 1.0 - self.cfg.explore
            neighbours = [i for i in (cur - 1, cur + 1) if 0 <= i < n]
            for i in neighbours:
                w[i] += self.cfg.explore / len(neighbours)
            if not neighbours:
                w[cur] = 1.0
        if w.sum() <= 0:
            raise ValueError(f"curriculum gives domain {self.domains[d]!r} no tier with positive weight")
        return w / w.sum()

    def draw(self, state: dict, step: int, rng: np.random.Generator, n: int) -> list[tuple[str, int, int]]:
        """n (domain, tier, seed) triples with training seeds; a replay_fraction share re-draws failures."""
        out = []
        state = _complete(state)
        live = np.flatnonzero(state["replay_domain"] >= 0)
        w = np.array([self.tag_weight(FAILURE_TAGS[state["replay_tag"][i]]) for i in live], float)
        w = w * self.cfg.replay_weight ** state["replay_attempts"][live].astype(float)
        live, w = live[w > 0], w[w > 0]
        n_replay = int(rng.binomial(n, self.cfg.replay_fraction)) if len(live) else 0
        for slot in rng.choice(live, size=n_replay, p=w / w.sum()) if n_replay else []:
            out.append(
                (
                    self.domains[state["replay_domain"][slot]],
                    int(state["replay_tier"][slot]),
                    int(state["replay_seed"][slot]),
                )
            )
        for d in rng.choice(len(self.domains), size=n - n_replay, p=self.weights):
            tier_i = rng.choice(len(self.tiers[d]), p=self.tier_probs(state, step, d))
            out.append((self.domains[d], self.tiers[d][tier_i], int(rng.integers(0, EVAL_SEED_START))))
        return out

    def update(self, state: dict, outcomes) -> dict:
        """Fold (domain, tier, seed, score) outcomes into the state (a new dict; the input is not changed)."""
        s = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in _complete(state).items()}
        index = {name: i for i, name in enumerate(self.domains)}
        a = self.cfg.ema
        for outcome in outcomes:
            domain, tier, seed, score = outcome[:4]
            if domain not in index:
                raise KeyError(f"curriculum outcome for domain {domain!r}, not in this curriculum {self.domains}")
            d = index[domain]
            if tier not in self.tiers[d]:
                raise ValueError(f"curriculum outcome for {domain!r} tier {tier}, allowed tiers {self.tiers[d]}")
            t = self.tiers[d].index(tier)
            s["ema"][d, t] = (1 - a) * s["ema"][d, t] + a * float(score)
            s["count"][d, t] += 1
            self._replay_update(s, d, tier, int(seed), float(score), outcome[4] if len(outcome) > 4 else None)
            if self.kind != "adaptive" or t != s["tier_index"][d]:
                continue
            s["since_move"][d] += 1
            # Move only on min_samples fresh outcomes at the current tier, so one lucky streak cannot cascade.
            if s["since_move"][d] < self.cfg.min_samples:
                continue
            if s["ema"][d, t] > self.cfg.band_high and t + 1 < len(self.tiers[d]):
                s["tier_index"][d] += 1
                s["promotions"] += 1
                s["since_move"][d] = 0
            elif s["ema"][d, t] < self.cfg.band_low and t > 0:
                s["tier_index"][d] -= 1
                s["demotions"] += 1
                s["since_move"][d] = 0
        return s

    def tag_weight(self, tag: str) -> float:
        return float(self.cfg.replay_tag_weights.get(tag, 1.0))

    def _replay_update(self, s: dict, d: int, tier: int, seed: int, score: float, tag: str | None):
        """Pool bookkeeping for one outcome (in place on the copied state s)."""
        cap = self.cfg.replay_capacity
        if self.cfg.replay_fraction <= 0 or cap <= 0:
            return
        tag = tag if tag is not None else ("wrong_answer" if score < 1.0 else "passed")
        if score < 1.0 and tag not in FAILURE_TAGS:
            raise ValueError(f"failure tag {tag!r} for task {self.domains[d]}:t{tier}:s{seed}; known: {FAILURE_TAGS}")
        hit = np.flatnonzero((s["replay_domain"] == d) & (s["replay_tier"] == tier) & (s["replay_seed"] == seed))
        if len(hit):  # a pooled task came back: count the attempt; solved tasks leave the pool
            slot = hit[0]
            s["replay_attempts"][slot] += 1
            s["replay_redrawn"] += 1
            if score >= 1.0:
                s["replay_domain"][slot] = -1
                s["replay_solved"] += 1
            else:
                s["replay_tag"][slot] = FAILURE_TAGS.index(tag)
        elif score < 1.0 and self.tag_weight(tag) > 0:
            slot = s["replay_next"] % cap
            s["replay_domain"][slot], s["replay_tier"][slot], s["replay_seed"][slot] = d, tier, seed
            s["replay_tag"][slot], s["replay_attempts"][slot] = FAILURE_TAGS.index(tag), 0
            s["replay_next"] += 1

    def replay_pool(self, state: dict) -> list[dict]:
        """The live pool entries: domain, tier, seed, tag, attempts (for reports and tests)."""
        state = _complete(state)
        return [{"domain": self.domains[state["replay_domain"][i]], "tier": int(state["replay_tier"][i]),
                 "seed": int(state["replay_seed"][i]), "tag": FAILURE_TAGS[state["replay_tag"][i]],
                 "attempts": int(state["replay_attempts"][i])} for i in np.flatnonzero(state["replay_domain"] >= 0)]

    def tasks(self, state: dict, step: int, rng: np.random.Generator, n: int) -> list[Task]:
        return [get_domain(d).generate(seed, tier) for d, tier, seed in self.draw(state, step, rng, n)]


CURRICULA = ("fixed", "staged", "adaptive")


def _replay_extras(cap: int) -> dict:
    return {"replay_tag": np.zeros(cap, np.int64), "replay_attempts": np.zeros(cap, np.int64),
            "replay_redrawn": 0, "replay_solved": 0}


def _complete(state: dict) -> dict:
    """A state saved before the pool kept tags and attempts gets them (empty) instead of failing on resume."""
    if "replay_tag" in state:
        return state
    return {**state, **_replay_extras(len(state["replay_domain"]))}


def load_replay_file(path: str) -> list[tuple[str, int, int, float, str]]:
    """Failed-task outcomes (score 0) from a tasks.jsonl written by `python -m rlpt.flywheel`."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                rec = json.loads(line)
                try:
                    out.append((rec["domain"], int(rec["tier"]), int(rec["seed"]), 0.0, rec["tag"]))
                except KeyError as e:
                    raise KeyError(f"curriculum.replay_file {path}:{n} lacks {e}") from None
    return out


def build_curriculum(cfg: CurriculumConfig, domains_cfg: DomainsConfig) -> Curriculum:
    """The curriculum named cfg.name over the domains and tiers selected by domains_cfg."""
    if cfg.name not in CURRICULA:
        raise KeyError(f"unknown curriculum {cfg.name!r}; known: {CURRICULA}")
    if not 0.0 <= cfg.band_low < cfg.band_high <= 1.0:
        raise ValueError(f"curriculum band must satisfy 0 <= low < high <= 1, got {cfg.band_low}, {cfg.band_high}")
    if not 0.0 <= cfg.replay_fraction <= 1.0 or cfg.replay_weight < 0 or cfg.replay_capacity < 0:
        raise ValueError(f"curriculum.replay_fraction must be in [0, 1], replay_weight and replay_capacity >= 0; got "
                         f"{cfg.replay_fraction}, {cfg.replay_weight}, {cfg.replay_capacity}")
    bad = {k: v for k, v in cfg.replay_tag_weights.items() if k not in FAILURE_TAGS or v < 0}
    if bad:
        raise ValueError(f"curriculum.replay_tag_weights {bad}: tags must be in {FAILURE_TAGS}, weights >= 0")
    names = resolve(domains_cfg.include, domains_cfg.exclude)
    tiers = []
    for name in names:
        allowed = get_domain(name).tiers
        chosen = tuple(t for t in allowed if not domains_cfg.tiers or t in domains_cfg.tiers)
        if not chosen:
            raise ValueError(f"domain {name!r} has tiers {allowed}, none in {domains_cfg.tiers}")
        tiers.append(chosen)
    weights = np.array([_weight(name, domains_cfg.weights) for name in names], float)
    if (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(f"domain weights must be >= 0 with a positive sum, got {dict(zip(names, weights))}")
    return Curriculum(cfg.name, tuple(names), tuple(tiers), weights / weights.sum(), cfg)


def _weight(name: str, weights: dict[str, float]) -> float:
    for pattern, w in weights.items():
        if fnmatch.fnmatchcase(name, pattern):
            return float(w)
    return 1.0


def encode_state(state: dict) -> dict:
    """Curriculum state (numpy arrays, ints) -> JSON-able."""
    return {k: {"__nd__": v.tolist(), "dtype": str(v.dtype)} if isinstance(v, np.ndarray) else v
            for k, v in state.items()}


def decode_state(state: dict) -> dict:
    return {k: np.asarray(v["__nd__"], v["dtype"]) if isinstance(v, dict) and "__nd__" in v else v
            for k, v in state.items()}
