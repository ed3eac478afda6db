"""Reward components in the RL loop: per-domain component metrics, judge/verifier disagreement, and the
reward-hacking audit (a shaping component rising while the verifier's outcome does not)."""
import collections
import dataclasses

import numpy as np

from rlpt.observe.drift import DriftDetector, ks_statistic, psi

COMPONENT = "reward_component"  # row keys: reward_component/<name>, reward_component/<domain>/<name>
JUDGE_PREFIX = "judge_"  # rlpt.rewards.judges.JUDGE_PREFIX (kept here: rlpt.observe does not import judges)
OUTCOME_COMPONENTS = ("correctness",)  # the verifier's outcome itself: never audited as shaping


def _row_domains(traj) -> list[str]:
    return [traj.tasks[int(g)].domain for g in traj.group_ids]


def component_values(traj) -> dict[str, dict[str, np.ndarray]]:
    """domain -> component -> (n,) values of the domain's rows (a component the domain's table lacks is absent)."""
    out: dict[str, dict[str, list]] = {}
    for d, parts in zip(_row_domains(traj), traj.components or []):
        for name, v in parts.items():
            out.setdefault(d, {}).setdefault(name, []).append(float(v))
    return {d: {n: np.asarray(v) for n, v in t.items()} for d, t in out.items()}


def outcomes(traj) -> dict[str, np.ndarray]:
    """domain -> (n,) the verifier's scores (Verdict.score) of the domain's rows; {} without verdicts."""
    out: dict[str, list] = {}
    for d, v in zip(_row_domains(traj), traj.verdicts or []):
        out.setdefault(d, []).append(float(v.score))
    return {d: np.asarray(v) for d, v in out.items()}


def component_row(traj) -> dict[str, float]:
    """Metrics for a step's row: reward_component/<name> (all rows that have it), reward_component/<domain>/
    <name>, and for each judge component judge_disagreement/<judge>/<domain>: the share of rows where the
    judge (score >= 0.5) and the verifier (passed) disagree. {} when no mixture set the rewards."""
    if traj.components is None:
        return {}
    row: dict[str, float] = {}
    total: dict[str, list] = {}
    passed = np.asarray(traj.passed, bool)
    domains = _row_domains(traj)
    for d, table in sorted(component_values(traj).items()):
        for name, v in table.items():
            row[f"{COMPONENT}/{d}/{name}"] = float(v.mean())
            total.setdefault(name, []).append(v)
            if name.startswith(JUDGE_PREFIX):
                idx = [i for i, x in enumerate(domains) if x == d]
                row[f"judge_disagreement/{name[len(JUDGE_PREFIX):]}/{d}"] = float(np.mean((v >= 0.5) != passed[idx]))
    row |= {f"{COMPONENT}/{n}": float(np.concatenate(v).mean()) for n, v in sorted(total.items())}
    return row


def run_means(history: list[dict]) -> dict[str, float]:
    """component -> mean of its per-step means over the run (the summary's reward_components)."""
    prefix = COMPONENT + "/"
    vals: dict[str, list] = {}
    for h in history:
        for k, v in h.items():
            if k.startswith(prefix) and k.count("/") == 1:
                vals.setdefault(k[len(prefix):], []).append(v)
    return {k: float(np.mean(v)) for k, v in sorted(vals.items())}


@dataclasses.dataclass(frozen=True)
class HackingAlert:
    """A shaping component of `domain` shifted up (KS / PSI past the drift thresholds) while the verifier's
    outcome over the same steps did not rise, or a judge's disagreement with the verifier (component
    'judge_disagreement/<judge>') shifted up: the policy is being paid for something other than success."""

    step: int
    domain: str
    component: str
    ks: float
    psi: float
    component_before: float
    component_after: float
    outcome_before: float
    outcome_after: float

    def message(self) -> str:
        return (f"reward hacking suspected in {self.domain!r} at step {self.step}: {self.component} "
                f"{self.component_before:.3f} -> {self.component_after:.3f} (KS {self.ks:.3f}, PSI {self.psi:.3f}) "
                f"while the verifier's outcome went {self.outcome_before:.3f} -> {self.outcome_after:.3f}")


class RewardAuditObserver:
    """The reward-hacking audit. Per domain it follows each shaping component (every component but the
    outcome's) and, for each judge, the per-sample judge/verifier disagreement. A stream's anchor is its first
    `baseline` steps (after the start or its last alert); each step its last `window` steps are compared with
    the anchor (two-sample KS and PSI, rlpt.observe.drift, thresholds as the drift detector's: both must pass,
    a threshold <= 0 switches its test off). A fixed anchor, unlike the drift detector's rolling baseline, also
    catches a slow climb. Alert 'reward_hacking' (through the AlertSink) when a shaping component shifted up
    while the domain's mean verifier outcome over those window steps is no higher than over the anchor's, or
    when a judge's disagreement with the verifier shifted up. Adds reward_share/<domain>/<component> (share of
    the summed |component| values) to the row."""

    def __init__(self, sink, *, window: int, baseline: int, min_samples: int, bins: int, ks_threshold: float,
                 psi_threshold: float):
        DriftDetector(window=window, baseline=baseline, min_samples=min_samples, bins=bins,
                      ks_threshold=ks_threshold, psi_threshold=psi_threshold)  # the same argument checks
        self.sink, self.window, self.baseline, self.min_samples, self.bins = sink, window, baseline, min_samples, bins
        self.ks_threshold, self.psi_threshold = ks_threshold, psi_threshold
        # stream -> (anchor steps, recent steps); a step is (values (n,), the domain's mean outcome)
        self.streams: dict[str, tuple[list, collections.deque]] = {}
        self.alert_steps: list[int] = []

    def _test(self, anchor: list, recent) -> tuple[float, float] | None:
        a = np.concatenate([v for v, _ in anchor])
        b = np.concatenate([v for v, _ in recent])
        if a.size < self.min_samples or b.size < self.min_samples:
            return None
        ks, p = ks_statistic(a, b), psi(a, b, self.bins)
        hit = (self.ks_threshold <= 0 or ks > self.ks_threshold) and (self.psi_threshold <= 0 or p > self.psi_threshold)
        return (ks, p) if hit and b.mean() > a.mean() else None

    def on_step(self, step: int, traj, row: dict) -> None:
        if traj.components is None or traj.verdicts is None:
            return
        outcome = {d: float(v.mean()) for d, v in outcomes(traj).items()}
        passed = np.asarray(traj.passed, bool)
        domains = np.asarray(_row_domains(traj))
        feed = {}
        for d, table in component_values(traj).items():
            mags = {n: float(np.abs(v).mean()) for n, v in table.items()}
            norm = sum(mags.values())
            for n, v in table.items():
                if norm > 0:
                    row[f"reward_share/{d}/{n}"] = mags[n] / norm
                if n not in OUTCOME_COMPONENTS:
                    feed[(d, n)] = v
                if n.startswith(JUDGE_PREFIX):
                    feed[(d, f"judge_disagreement/{n[len(JUDGE_PREFIX):]}")] = ((v >= 0.5) != passed[domains == d])
        for (d, n), v in sorted(feed.items()):
            anchor, recent = self.streams.setdefault(f"{d}|{n}", ([], collections.deque(maxlen=self.window)))
            item = (np.asarray(v, np.float64), outcome[d])
            if len(anchor) < self.baseline:
                anchor.append(item)
                continue
            recent.append(item)
            if len(recent) < self.window:
                continue
            shift = self._test(anchor, recent)
            if shift is None:
                continue
            ob, oa = float(np.mean([o for _, o in anchor])), float(np.mean([o for _, o in recent]))
            if not n.startswith("judge_disagreement/") and oa > ob:
                continue  # the outcome rose with it: learning, not hacking
            cb = float(np.concatenate([x for x, _ in anchor]).mean())
            ca = float(np.concatenate([x for x, _ in recent]).mean())
            self.sink.emit("reward_hacking", HackingAlert(step, d, n, *shift, cb, ca, ob, oa))
            self.alert_steps.append(step)
            anchor.clear()  # one alert per shift: a new anchor is collected from the next steps
            recent.clear()

    def close(self) -> dict:
        return {"reward_hacking_alerts": len(self.alert_steps), "reward_hacking_alert_steps": list(self.alert_steps)}
