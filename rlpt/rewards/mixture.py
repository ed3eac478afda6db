"""Reward mixtures: per domain, a weighted sum of named components, clipped."""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import TYPE_CHECKING

from rlpt.rewards.components import COMPONENTS

if TYPE_CHECKING:  # rlpt.config pulls in JAX through the model schemas; keep this module light
    from rlpt.config.tasks import RewardComponentConfig, RewardConfig


@dataclasses.dataclass(frozen=True)
class RewardMixture:
    """Built from a RewardConfig; `score` returns (reward, {component: value})."""

    cfg: RewardConfig

    def __post_init__(self):
        for table in [self.cfg.components, *self.cfg.per_domain.values()]:
            for name in table:
                if name not in COMPONENTS:
                    raise KeyError(f"reward {self.cfg.name!r}: unknown component {name!r}; known: {sorted(COMPONENTS)}")
        if self.cfg.clip_low > self.cfg.clip_high:
            raise ValueError(f"reward clip_low {self.cfg.clip_low} > clip_high {self.cfg.clip_high}")

    def table(self, domain: str) -> dict[str, RewardComponentConfig]:
        for pattern, table in self.cfg.per_domain.items():
            if fnmatch.fnmatchcase(domain, pattern):
                return table
        return self.cfg.components

    def score(self, task, response: str, verdict) -> tuple[float, dict[str, float]]:
        parts = {name: COMPONENTS[name](task, response, verdict, c) for name, c in self.table(task.domain).items()}
        total = sum(self.table(task.domain)[name].weight * v for name, v in parts.items())
        return float(min(self.cfg.clip_high, max(self.cfg.clip_low, total))), parts
