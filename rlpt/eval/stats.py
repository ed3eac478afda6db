"""Bootstrap confidence intervals: the paired difference of two evaluations on the same tasks, and the mean of a
few runs (seeds) of one configuration."""
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


@dataclasses.dataclass(frozen=True)
class MeanInterval:
    """mean of n values with a percentile bootstrap interval at `level` (n=1: the interval is the point)."""

    mean: float
    low: float
    high: float
    level: float
    n: int


def bootstrap_mean(values, *, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> MeanInterval:
    """Percentile interval for the mean of `values` (N,), resampling them with replacement. Seeded.

    Meant for a handful of seeds of one configuration: with N=2 the interval is the two values' range, so it says
    little; the caller should report N beside it."""
    x = np.asarray(values, np.float64)
    if x.ndim != 1 or x.shape[0] == 0:
        raise ValueError(f"bootstrap_mean needs a non-empty 1-D array of values, got shape {x.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = x.shape[0]
    if n == 1:
        return MeanInterval(float(x[0]), float(x[0]), float(x[0]), level, 1)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # (R, N); N is a few seeds
    alpha = (1 - level) / 2
    low, high = np.quantile(x[idx].mean(axis=1), [alpha, 1 - alpha])
    return MeanInterval(float(x.mean()), float(low), float(high), level, n)
