"""Reward-distribution drift per domain against a rolling baseline: two-sample KS statistic and PSI."""
import collections
import dataclasses

import numpy as np


def ks_statistic(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic sup_x |F_a(x) - F_b(x)| of 1-D samples a (n,), b (m,)."""
    a, b = np.sort(np.asarray(a, np.float64).ravel()), np.sort(np.asarray(b, np.float64).ravel())
    if a.size == 0 or b.size == 0:
        raise ValueError(f"ks_statistic needs two non-empty samples, got sizes {a.size} and {b.size}")
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / a.size
    cdf_b = np.searchsorted(b, grid, side="right") / b.size
    return float(np.abs(cdf_a - cdf_b).max())


def psi(expected, actual, bins: int = 10, eps: float = 1e-4) -> float:
    """Population stability index sum (p_a - p_e) ln(p_a / p_e) over `bins` equal-width bins spanning both
    samples; `eps` smooths empty bins. 0 for identical histograms; > 0.25 is the usual 'major shift'."""
    e, a = np.asarray(expected, np.float64).ravel(), np.asarray(actual, np.float64).ravel()
    if e.size == 0 or a.size == 0:
        raise ValueError(f"psi needs two non-empty samples, got sizes {e.size} and {a.size}")
    lo, hi = min(e.min(), a.min()), max(e.max(), a.max())
    if hi <= lo:
        return 0.0
    edges = np.linspace(lo, hi, bins + 1)
    pe = np.histogram(e, edges)[0] / e.size + eps
    pa = np.histogram(a, edges)[0] / a.size + eps
    pe, pa = pe / pe.sum(), pa / pa.sum()
    return float(np.sum((pa - pe) * np.log(pa / pe)))


@dataclasses.dataclass(frozen=True)
class Alert:
    """One drift alert: the recent window of `domain` differs from its baseline."""

    step: int
    domain: str
    ks: float
    psi: float
    baseline_mean: float
    window_mean: float
    n_baseline: int
    n_window: int

    def message(self) -> str:
        return (f"reward drift in {self.domain!r} at step {self.step}: mean {self.baseline_mean:.3f} -> "
                f"{self.window_mean:.3f} (KS {self.ks:.3f}, PSI {self.psi:.3f}, n={self.n_baseline}/{self.n_window})")


class DriftDetector:
    """Per domain, keeps the rewards of the last baseline + window steps. Each step compares the last
    `window` steps with the `baseline` steps before them; an alert fires when every enabled test exceeds its
    threshold (ks_threshold / psi_threshold; <= 0 disables a test) and both samples hold >= min_samples
    rewards. Nothing is tested before a full baseline + window. After an alert the domain's history restarts
    from the alerting window, so one shift raises one alert and the new regime becomes the baseline."""

    def __init__(self, *, window: int, baseline: int, min_samples: int, bins: int, ks_threshold: float,
                 psi_threshold: float):
        if window < 1 or baseline < 1:
            raise ValueError(f"observe.drift_window and drift_baseline must be >= 1, got {window}, {baseline}")
        if ks_threshold <= 0 and psi_threshold <= 0:
            raise ValueError("observe.drift_ks_threshold and drift_psi_threshold are both <= 0: no drift test left")
        self.window, self.baseline, self.min_samples, self.bins = window, baseline, min_samples, bins
        self.ks_threshold, self.psi_threshold = ks_threshold, psi_threshold
        self.history: dict[str, collections.deque] = {}
        self.last: dict[str, tuple[float, float]] = {}  # domain -> (ks, psi) of the latest comparison

    def update(self, step: int, rewards: dict[str, np.ndarray]) -> list[Alert]:
        """Add this step's rewards per domain (1-D arrays); returns the alerts raised at this step."""
        alerts = []
        for domain, r in sorted(rewards.items()):
            hist = self.history.setdefault(domain, collections.deque(maxlen=self.window + self.baseline))
            hist.append(np.asarray(r, np.float64).ravel())
            if len(hist) < hist.maxlen:  # a full baseline first: also the quiet period after an alert
                continue
            steps = list(hist)
            base, recent = np.concatenate(steps[:-self.window]), np.concatenate(steps[-self.window:])
            if base.size < self.min_samples or recent.size < self.min_samples:
                continue
            ks, p = ks_statistic(base, recent), psi(base, recent, self.bins)
            self.last[domain] = (ks, p)
            ks_hit = self.ks_threshold <= 0 or ks > self.ks_threshold
            psi_hit = self.psi_threshold <= 0 or p > self.psi_threshold
            if ks_hit and psi_hit:
                alerts.append(Alert(step, domain, ks, p, float(base.mean()), float(recent.mean()), base.size,
                                    recent.size))
                hist.clear()
                hist.extend(steps[-self.window:])
        return alerts
