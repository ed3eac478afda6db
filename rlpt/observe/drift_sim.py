"""Simulated reward streams for the drift detector: detection delay after a shift, false-positive rate when
stationary or slowly learning. Used by scripts/drift_simulation.py and tests/observe/test_drift.py."""
import dataclasses

import numpy as np

from rlpt.observe.drift import DriftDetector


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Binary pass/fail rewards, `n` per step, success probability p(step): `p0` rising linearly by `slope`
    per step, switched to `p1` from `shift_at` on (shift_at < 0: no shift)."""

    name: str
    p0: float
    p1: float = 0.0
    shift_at: int = -1
    slope: float = 0.0
    n: int = 256
    steps: int = 300

    def p(self, step: int) -> float:
        p = self.p1 if 0 <= self.shift_at <= step else self.p0 + self.slope * step
        return float(np.clip(p, 0.0, 1.0))


SCENARIOS = (
    Scenario("collapse 0.6->0.1", 0.6, 0.1, shift_at=150),
    Scenario("drop 0.6->0.3", 0.6, 0.3, shift_at=150),
    Scenario("jump 0.3->0.7 (reward hack)", 0.3, 0.7, shift_at=150),
    Scenario("drop 0.6->0.3, 32 per step", 0.6, 0.3, shift_at=150, n=32),
    Scenario("stationary 0.5", 0.5),
    Scenario("drop 0.6->0.1, 8 per step", 0.6, 0.1, shift_at=150, n=8),
    Scenario("stationary 0.5, 32 per step", 0.5, n=32),
    Scenario("stationary 0.5, 8 per step", 0.5, n=8),
    Scenario("learning 0.2->0.5 over 300 steps", 0.2, slope=0.001),
)


def run_scenario(sc: Scenario, make_detector, seeds: int) -> dict:
    """Over `seeds` streams: shift scenarios give detection delays (steps from the shift to the first alert
    at or after it; None if missed) and alerts before the shift; stationary ones give the alert count."""
    delays, false_alerts, runs_with_fp, missed = [], 0, 0, 0
    steps_checked = 0
    for seed in range(seeds):
        rng = np.random.default_rng([seed, 17])
        det: DriftDetector = make_detector()
        fp_here, delay = 0, None
        for step in range(sc.steps):
            r = (rng.random(sc.n) < sc.p(step)).astype(np.float32)
            alerts = det.update(step, {"d": r})
            before = sc.shift_at < 0 or step < sc.shift_at
            steps_checked += before
            if alerts and before:
                fp_here += 1
            elif alerts and delay is None:
                delay = step - sc.shift_at
        false_alerts += fp_here
        runs_with_fp += fp_here > 0
        if sc.shift_at >= 0:
            if delay is None:
                missed += 1
            else:
                delays.append(delay)
    from scipy.stats import chi2

    upper = chi2.ppf(0.975, 2 * false_alerts + 2) / 2  # exact Poisson 97.5% upper bound on the count
    out = {"scenario": sc.name, "seeds": seeds, "steps_checked": steps_checked, "false_alerts": false_alerts,
           "false_alerts_per_1k_steps": 1000.0 * false_alerts / max(steps_checked, 1),
           "false_alerts_per_1k_steps_ub": 1000.0 * float(upper) / max(steps_checked, 1),
           "runs_with_false_alert": runs_with_fp / seeds}
    if sc.shift_at >= 0:
        d = np.asarray(delays or [np.nan], float)
        out |= {"detected": 1.0 - missed / seeds, "delay_mean": float(np.nanmean(d)),
                "delay_p95": float(np.nanpercentile(d, 95)), "delay_max": float(np.nanmax(d))}
    return out
