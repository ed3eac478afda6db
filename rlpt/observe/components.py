"""Reward components in the RL loop: per-domain component metrics, judge/verifier disagreement, and the
reward-hacking audit (a shaping component rising while the verifier's outcome does not)."""
import collections
import dataclasses

import numpy as np

from rlpt.observe.drift import DriftDetector

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
    outcome over the same steps did not rise: the policy is being paid for something other than success."""

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
    """Feeds each shaping component's values per domain (every component but the outcome's) to a
    DriftDetector with the run's drift settings; an upward shift while the domain's mean verifier outcome
    over the detector's window is no higher than over its baseline raises a 'reward_hacking' alert through
    the AlertSink. Adds reward_share/<domain>/<component> (share of the summed |component| values) to the row."""

    def __init__(self, detector: DriftDetector, sink):
        self.detector, self.sink = detector, sink
        span = detector.window + detector.baseline
        self.outcome: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=span))
        self.alert_steps: list[int] = []

    def on_step(self, step: int, traj, row: dict) -> None:
        if traj.components is None or traj.verdicts is None:
            return
        for d, v in outcomes(traj).items():
            self.outcome[d].append(float(v.mean()))
        streams = {}
        for d, table in component_values(traj).items():
            mags = {n: float(np.abs(v).mean()) for n, v in table.items()}
            norm = sum(mags.values())
            for n, v in table.items():
                if norm > 0:
                    row[f"reward_share/{d}/{n}"] = mags[n] / norm
                if n not in OUTCOME_COMPONENTS:
                    streams[f"{d}|{n}"] = v
        W = self.detector.window
        for alert in self.detector.update(step, streams):
            d, n = alert.domain.split("|", 1)
            hist = list(self.outcome[d])
            before, after = hist[:-W], hist[-W:]
            if alert.window_mean <= alert.baseline_mean or not before:
                continue
            ob, oa = float(np.mean(before)), float(np.mean(after))
            if oa > ob:
                continue
            self.sink.emit("reward_hacking", HackingAlert(step, d, n, alert.ks, alert.psi, alert.baseline_mean,
                                                          alert.window_mean, ob, oa))
            self.alert_steps.append(step)

    def close(self) -> dict:
        return {"reward_hacking_alerts": len(self.alert_steps), "reward_hacking_alert_steps": list(self.alert_steps)}
