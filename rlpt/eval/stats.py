"""Paired bootstrap confidence intervals for the difference of two evaluations on the same tasks."""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Interval:
    """delta = mean(b) - mean(a) over paired items, with a percentile bootstrap interval at `level`."""

    delta: float
    low: float
    high: float
    level: float
    n: int

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0


def paired_bootstrap(a, b, *, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """Percentile interval for mean(b - a), resampling items (pairs) with replacement.

    a, b: per-item scores (N,) of two systems on the same N items, in the same order. Seeded: the same
    inputs and seed give the same interval.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_bootstrap needs two 1-D score arrays of one shape, got {a.shape} and {b.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = a.shape[0]
    if n == 0:
        raise ValueError("paired_bootstrap of no items")
    diff = b - a  # (N,)
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    chunk = max(1, (1 << 22) // n)  # bound the (chunk, N) index matrix to ~32 MiB
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        idx = rng.integers(0, n, size=(m, n))  # (m, N)
        stats[start:start + m] = diff[idx].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Interval(float(diff.mean()), float(low), float(high), level, n)
