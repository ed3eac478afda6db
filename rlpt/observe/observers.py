"""Per-step observers for the RL loop: TensorBoard, run health, drift alerts, trajectory and failure logs.

An observer has `on_step(step, traj, row)` (traj: rlpt.rollout.single_turn.Trajectories; row: the step's
metrics incl. 'reward/<domain>', gen_s, verify_s, train_s, idle_s) and `close() -> dict` (merged into the
run summary). `default_observers(cfg, out_dir)` builds the set ObserveConfig asks for.
"""
import os
import time

import numpy as np

from rlpt.observe.alerts import AlertSink
from rlpt.observe.components import RewardAuditObserver
from rlpt.observe.drift import DriftDetector
from rlpt.observe.records import FailureObserver, TrajectoryLogObserver, groups
from rlpt.observe.tags import FAILURE_TAGS, response_of, sample_tags
from rlpt.observe.tensorboard import TBWriter


def domain_rewards(traj) -> dict[str, np.ndarray]:
    """domain -> (n,) rewards of all samples of that domain's tasks in this batch."""
    out: dict[str, list] = {}
    for i, rows in enumerate(groups(traj)):
        out.setdefault(traj.tasks[i].domain, []).append(np.asarray(traj.rewards)[rows])
    return {d: np.concatenate(v) for d, v in out.items()}


class HealthObserver:
    """Verifier latency and failure rates, sandbox errors, failure tags, trainer/sampler utilisation; adds
    'pass/<domain>' (pass rate of the domain's samples) to the step's row.

    Utilisation of a step: train_s (trainer) and gen_s + verify_s (sampler) over the step's wall time (row
    'step_s', else the time since the previous step); in async mode the two overlap."""

    def __init__(self, tb: TBWriter | None):
        self.tb = tb
        self.samples = self.steps = 0
        self.tag_counts = {t: 0 for t in FAILURE_TAGS}
        self.verify_ms: list[float] = []
        self.util: list[tuple[float, float]] = []
        self._last = None

    def on_step(self, step: int, traj, row: dict) -> None:
        now = time.monotonic()
        parts = {k: float(row.get(f"{k}_s", 0.0)) for k in ("gen", "verify", "train", "idle")}
        measured = now - self._last if self._last is not None else 0.0
        self._last = now
        # the loop's own step time when it reports one (evaluation excluded); the trainer thread spends
        # >= train + idle and the sampler >= gen + verify, whatever the mode
        wall = float(row["step_s"]) if "step_s" in row else measured
        wall = max(wall, parts["train"] + parts["idle"], parts["gen"] + parts["verify"])
        passed: dict[str, list] = {}
        for i, rows in enumerate(groups(traj)):
            passed.setdefault(traj.tasks[i].domain, []).extend(np.asarray(traj.passed)[rows].tolist())
        row |= {f"pass/{d}": float(np.mean(v)) for d, v in sorted(passed.items())}  # joins metrics.jsonl
        tags = sample_tags(traj)
        n = max(len(tags), 1)
        self.samples += len(tags)
        self.steps += 1
        for t in tags:
            if t in self.tag_counts:
                self.tag_counts[t] += 1
        ms = 1000.0 * parts["verify"] / n
        self.verify_ms.append(ms)
        trainer, sampler = parts["train"] / max(wall, 1e-9), (parts["gen"] + parts["verify"]) / max(wall, 1e-9)
        self.util.append((trainer, sampler))
        if self.tb is not None:
            metrics = {f"fail/{t}": tags.count(t) / n for t in FAILURE_TAGS}
            metrics |= {"verifier/ms_per_sample": ms, "verifier/error_rate": metrics["fail/verifier_error"],
                        "sandbox/error_rate": metrics["fail/sandbox_error"], "util/trainer": trainer,
                        "util/sampler": sampler}
            self.tb.scalars(metrics, step)

    def close(self) -> dict:
        n = max(self.samples, 1)
        util = np.asarray(self.util or [(0.0, 0.0)])
        return {"verifier_error_rate": self.tag_counts["verifier_error"] / n,
                "sandbox_error_rate": self.tag_counts["sandbox_error"] / n,
                "verifier_ms_per_sample": float(np.mean(self.verify_ms)) if self.verify_ms else 0.0,
                "verifier_ms_per_sample_p95": float(np.percentile(self.verify_ms, 95)) if self.verify_ms else 0.0,
                "trainer_util": float(util[:, 0].mean()), "sampler_util": float(util[:, 1].mean()),
                **{f"fail_rate/{t}": c / n for t, c in self.tag_counts.items()}}


class DriftObserver:
    """Feeds per-domain rewards to a DriftDetector; alerts go to the AlertSink (log, TB, alerts.jsonl, hooks)."""

    def __init__(self, detector: DriftDetector, sink: AlertSink, tb: TBWriter | None):
        self.detector, self.sink, self.tb = detector, sink, tb
        self.alert_steps: list[int] = []

    def on_step(self, step: int, traj, row: dict) -> None:
        for alert in self.detector.update(step, domain_rewards(traj)):
            self.sink.emit("reward_drift", alert)
            self.alert_steps.append(step)
        if self.tb is not None:
            for d, (ks, p) in self.detector.last.items():
                self.tb.scalars({f"drift/ks/{d}": ks, f"drift/psi/{d}": p}, step)

    def close(self) -> dict:
        self.sink.close()
        return {"drift_alerts": len(self.alert_steps), "drift_alert_steps": list(self.alert_steps),
                "alerts_file": self.sink.path}


class TensorBoardObserver:
    """Row scalars, per-domain reward histograms and sample trajectories as text; owns (closes) the writer."""

    def __init__(self, tb: TBWriter, samples_every: int, samples_per_step: int):
        self.tb, self.every, self.per_step = tb, max(samples_every, 1), samples_per_step

    def on_step(self, step: int, traj, row: dict) -> None:
        self.tb.scalars({k: v for k, v in row.items() if k != "step" and isinstance(v, int | float)}, step)
        for d, r in domain_rewards(traj).items():
            self.tb.histogram(f"reward_hist/{d}", r, step)
        if step % self.every == 0 and self.per_step > 0:
            tags = sample_tags(traj)
            lines = []
            for r in range(min(self.per_step, len(traj.texts))):
                task = traj.tasks[int(traj.group_ids[r])]
                lines.append(f"**{task.id}** reward {float(traj.rewards[r]):.3f} ({tags[r]})\n\n"
                             f"    {task.prompt!r}\n    -> {response_of(traj.texts[r])!r}")
            self.tb.text("samples", "\n\n".join(lines), step)
        self.tb.flush()

    def close(self) -> dict:
        self.tb.close()
        return {}


def default_observers(cfg, out_dir: str) -> list:
    """The observers cfg.observe enables, writing under out_dir (only on process 0; [] elsewhere)."""
    import jax

    if jax.process_index() != 0:
        return []
    ocfg = cfg.observe
    os.makedirs(out_dir, exist_ok=True)
    tb = TBWriter(os.path.join(out_dir, "tb"), filename_suffix=".observe") if ocfg.tensorboard else None
    observers: list = [HealthObserver(tb)]
    if ocfg.drift:
        settings = dict(window=ocfg.drift_window, baseline=ocfg.drift_baseline, min_samples=ocfg.drift_min_samples,
                        bins=ocfg.drift_bins, ks_threshold=ocfg.drift_ks_threshold,
                        psi_threshold=ocfg.drift_psi_threshold)
        sink = AlertSink(out_dir, tb, ocfg.alert_hooks)
        # the audit goes first: DriftObserver.close closes the shared sink
        observers.append(RewardAuditObserver(sink, **settings | {"ks_threshold": ocfg.audit_ks_threshold,
                                                                   "psi_threshold": ocfg.audit_psi_threshold}))
        observers.append(DriftObserver(DriftDetector(**settings), sink, tb))
    if ocfg.trajectory_log:
        observers.append(TrajectoryLogObserver(os.path.join(out_dir, "trajectories"), ocfg.traj_log_max_bytes,
                                               ocfg.traj_log_max_files))
    if ocfg.failures:
        observers.append(FailureObserver(os.path.join(out_dir, "failures"), ocfg.failures_max_responses))
    if tb is not None:
        observers.append(TensorBoardObserver(tb, ocfg.samples_every, ocfg.samples_per_step))
    return observers
