"""Unbiased pass@k (Chen et al., 2021): 1 - C(n-c, k) / C(n, k) from n samples of which c passed."""
import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) passes.

    Uses the product form 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms a binomial coefficient,
    so it stays exact-ish for n in the thousands where C(n, k) overflows a float.
    """
    if not (isinstance(n, (int, np.integer)) and isinstance(c, (int, np.integer)) and isinstance(k, (int, np.integer))):
        raise TypeError(f"pass_at_k takes ints, got n={n!r} c={c!r} k={k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n, got n={n} c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n (samples), got k={k} n={n}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(ns, cs, k: int) -> float:
    """Mean pass@k over tasks with per-task sample counts `ns` and pass counts `cs`."""
    ns, cs = list(ns), list(cs)
    if not ns:
        raise ValueError("mean_pass_at_k of no tasks")
    return float(np.mean([pass_at_k(int(n), int(c), k) for n, c in zip(ns, cs)]))
