"""Curricula over (domain, tier): fixed mixture, staged easy-to-hard, adaptive success band, replay pool.

A curriculum is a frozen description plus an explicit state dict of numpy arrays and ints
(checkpointable as is): `init_state() -> state`, `draw(state, step, rng, n) -> [(domain, tier, seed)]`,
`update(state, outcomes) -> state` with outcomes `[(domain, tier, seed, score)]`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import TYPE_CHECKING

import numpy as np

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
        return {
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
        }

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
        live = np.flatnonzero(state["replay_domain"] >= 0)
        n_replay = int(rng.binomial(n, self.cfg.replay_fraction)) if len(live) else 0
        for slot in rng.choice(live, size=n_replay) if n_replay else []:
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
        s = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
        index = {name: i for i, name in enumerate(self.domains)}
        a = self.cfg.ema
        for domain, tier, seed, score in outcomes:
            d = index[domain]
            t = self.tiers[d].index(tier)
            s["ema"][d, t] = (1 - a) * s["ema"][d, t] + a * float(score)
            s["count"][d, t] += 1
            if score < 1.0 and self.cfg.replay_fraction > 0 and self.cfg.replay_capacity > 0:
                slot = s["replay_next"] % self.cfg.replay_capacity
                s["replay_domain"][slot], s["replay_tier"][slot], s["replay_seed"][slot] = d, tier, seed
                s["replay_next"] += 1
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

    def tasks(self, state: dict, step: int, rng: np.random.Generator, n: int) -> list[Task]:
        return [get_domain(d).generate(seed, tier) for d, tier, seed in self.draw(state, step, rng, n)]


CURRICULA = ("fixed", "staged", "adaptive")


def build_curriculum(cfg: CurriculumConfig, domains_cfg: DomainsConfig) -> Curriculum:
    """The curriculum named cfg.name over the domains and tiers selected by domains_cfg."""
    if cfg.name not in CURRICULA:
        raise KeyError(f"unknown curriculum {cfg.name!r}; known: {CURRICULA}")
    if not 0.0 <= cfg.band_low < cfg.band_high <= 1.0:
        raise ValueError(f"curriculum band must satisfy 0 <= low < high <= 1, got {cfg.band_low}, {cfg.band_high}")
    names = resolve(domains_cfg.include)
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
