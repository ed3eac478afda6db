"""Reward mixtures: per domain, a weighted sum of named components (judges included), clipped."""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from rlpt.rewards.components import get_component
from rlpt.rewards.judges import get_judge, prompt_text

if TYPE_CHECKING:  # rlpt.config pulls in JAX through the model schemas; keep this module light
    from rlpt.config.tasks import RewardComponentConfig, RewardConfig


def _typed(table: dict, where: str) -> dict:
    """Component tables with RewardComponentConfig values (YAML-composed nested tables arrive as mappings)."""
    if all(not isinstance(c, Mapping) for c in table.values()):
        return dict(table)
    from rlpt.config.tasks import RewardComponentConfig  # on use (start-up: jax)

    fields = {f.name for f in dataclasses.fields(RewardComponentConfig)}
    out = {}
    for name, c in table.items():
        if isinstance(c, Mapping):
            unknown = set(c) - fields
            if unknown:
                raise KeyError(f"{where}.{name}: unknown keys {sorted(unknown)}; known: {sorted(fields)}")
            c = RewardComponentConfig(**c)
        out[name] = c
    return out


@dataclasses.dataclass(frozen=True)
class RewardMixture:
    """Built from a RewardConfig; `score` returns (reward, {component: value}); `score_batch` scores many
    samples and calls each judge once per batch. Components named `judge_<name>` need the judge registered
    (rlpt.rewards.judges.register_judge) before the mixture is built."""

    cfg: RewardConfig

    def __post_init__(self):
        # OmegaConf leaves the inner tables of per_domain (dict of dict of dataclass) as plain dicts; type them.
        per_domain = {p: _typed(t, f"reward.per_domain[{p!r}]") for p, t in self.cfg.per_domain.items()}
        object.__setattr__(self, "cfg", dataclasses.replace(self.cfg, per_domain=per_domain))
        for where, table in [("components", self.cfg.components),
                             *((f"per_domain[{p!r}]", t) for p, t in self.cfg.per_domain.items())]:
            for name in table:
                try:
                    get_component(name)
                except KeyError as e:
                    raise KeyError(f"reward {self.cfg.name!r}.{where}: {e.args[0]}") from None
        if self.cfg.clip_low > self.cfg.clip_high:
            raise ValueError(f"reward clip_low {self.cfg.clip_low} > clip_high {self.cfg.clip_high}")

    def table(self, domain: str) -> dict[str, RewardComponentConfig]:
        for pattern, table in self.cfg.per_domain.items():
            if fnmatch.fnmatchcase(domain, pattern):
                return table
        return self.cfg.components

    def total(self, domain: str, parts: dict[str, float]) -> float:
        table = self.table(domain)
        value = sum(table[name].weight * v for name, v in parts.items())
        return float(min(self.cfg.clip_high, max(self.cfg.clip_low, value)))

    def score(self, task, response: str, verdict) -> tuple[float, dict[str, float]]:
        parts = {name: get_component(name)(task, response, verdict, c) for name, c in self.table(task.domain).items()}
        return self.total(task.domain, parts), parts

    def score_batch(self, tasks, responses, verdicts) -> tuple[np.ndarray, list[dict[str, float]]]:
        """(rewards (B,), per-sample component values); each judge scores all its samples in one call."""
        if not len(tasks) == len(responses) == len(verdicts):
            raise ValueError(f"score_batch got {len(tasks)} tasks, {len(responses)} responses, "
                             f"{len(verdicts)} verdicts")
        parts: list[dict[str, float]] = [{} for _ in tasks]
        judged: dict[str, list[int]] = {}
        for i, task in enumerate(tasks):
            for name, c in self.table(task.domain).items():
                fn = get_component(name)
                if hasattr(fn, "judge_name"):
                    parts[i][name] = 0.0  # filled below; keeps the table's order
                    judged.setdefault(name, []).append(i)
                else:
                    parts[i][name] = fn(task, responses[i], verdicts[i], c)
        for name, rows in judged.items():
            texts = [responses[i] if isinstance(responses[i], str) else "" for i in rows]
            out = get_judge(get_component(name).judge_name).score([prompt_text(tasks[i].prompt) for i in rows], texts)
            for i, v in zip(rows, out.scores):
                parts[i][name] = float(v)
        rewards = np.asarray([self.total(t.domain, p) for t, p in zip(tasks, parts)], np.float32)
        return rewards, parts


def mix_rewards(traj, mixture):
    """The trajectories with rewards from the reward mixture (rlpt.rewards.RewardMixture) and each row's
    component values in `components`; judges score the batch in one call each (time added to verify_s).
    Unchanged when there is no mixture, no verdicts (a rollout that records none), or components are set
    already (a rollout with its own reward_fn)."""
    if mixture is None or traj.verdicts is None or traj.components is not None:
        return traj
    t0 = time.time()
    tasks = [traj.tasks[int(g)] for g in traj.group_ids]
    texts = traj.reward_texts if traj.reward_texts is not None else traj.texts
    rewards, parts = mixture.score_batch(tasks, texts, traj.verdicts)
    return dataclasses.replace(traj, rewards=rewards, components=parts, verify_s=traj.verify_s + time.time() - t0)
