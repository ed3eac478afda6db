"""A judge wrapped with a calibration map fitted on a labelled set and refitted every `every` steps."""
from __future__ import annotations

import dataclasses

import numpy as np

from rlpt.rewards.calibration import agreement, calibrator_from_state, fit_threshold, make_calibrator
from rlpt.rewards.judges import Judge, JudgeScores, check_pairs, finish, new_counts


@dataclasses.dataclass(frozen=True)
class LabelledSet:
    """Pairs with a 0/1 label each (1 = the response is acceptable, e.g. it passed a hard verifier)."""

    prompts: list[str]
    responses: list[str]
    labels: np.ndarray  # (N,) in {0, 1}

    def __post_init__(self):
        check_pairs(self.prompts, self.responses)
        labels = np.asarray(self.labels)
        if labels.shape != (len(self.prompts),) or not np.isin(labels, (0, 1)).all():
            raise ValueError(f"LabelledSet labels must be (N={len(self.prompts)},) of 0/1, got shape {labels.shape}")
        if len(self.prompts) == 0:
            raise ValueError("LabelledSet is empty")


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
    """method: platt | isotonic; every: refit when this many steps have passed since the last fit;
    holdout_fraction: share of the labelled set kept out of the fit and used for the 'after' report."""

    method: str = "isotonic"
    every: int = 100
    n_bins: int = 10
    holdout_fraction: float = 0.0
    seed: int = 0


def calibration_report(before: np.ndarray, after: np.ndarray, labels: np.ndarray, failed: np.ndarray,
                       threshold: float, n_bins: int) -> dict:
    """Agreement of the judge's own scores (cut at 0.5) and of the calibrated ones (cut at `threshold`)."""
    labels = np.asarray(labels, np.float64)
    return {"before": agreement(before, labels, 0.5, n_bins), "after": agreement(after, labels, threshold, n_bins),
            "threshold": float(threshold), "failed": int(np.sum(failed)), "positives": float(labels.mean())}


class CalibratedJudge:
    """A Judge whose scores are P(label = 1) under a map refitted on `labelled` by `maybe_recalibrate(step)`.

    Failed items of the inner judge stay failures (score 0) and are left out of the fit. `state_dict()` holds the
    map, threshold, last fit step and report history (plain JSON types) for checkpoints.
    """

    def __init__(self, judge: Judge, labelled: LabelledSet, cfg: CalibrationConfig = CalibrationConfig()):
        make_calibrator(cfg.method)
        if cfg.every < 1 or not 0.0 <= cfg.holdout_fraction < 1.0:
            raise ValueError(f"calibration every={cfg.every} must be >= 1 and holdout_fraction="
                             f"{cfg.holdout_fraction} in [0, 1)")
        self.judge, self.labelled, self.cfg = judge, labelled, cfg
        n = len(labelled.prompts)
        order = np.random.default_rng(cfg.seed).permutation(n)
        n_hold = int(round(cfg.holdout_fraction * n))
        self.fit_rows, self.holdout_rows = np.sort(order[n_hold:]), np.sort(order[:n_hold])
        self.calibrator, self.threshold, self.last_step, self.history = None, 0.5, None, []
        self.counts = new_counts()

    def due(self, step: int) -> bool:
        return self.last_step is None or step - self.last_step >= self.cfg.every

    def maybe_recalibrate(self, step: int) -> dict | None:
        """Refit when due (the first call always fits); returns the new report or None."""
        return self.recalibrate(step) if self.due(step) else None

    def recalibrate(self, step: int) -> dict:
        lab = self.labelled
        out = self.judge.score(lab.prompts, lab.responses)
        labels = np.asarray(lab.labels, np.float64)
        fit = self.fit_rows[~out.failed[self.fit_rows]]
        if fit.size == 0:
            raise ValueError(f"calibration at step {step}: the judge failed on every labelled item of the fit split")
        calibrator = make_calibrator(self.cfg.method).fit(out.raw[fit], labels[fit])
        after = np.where(out.failed, 0.0, calibrator(np.nan_to_num(out.raw)))
        threshold = fit_threshold(after[self.fit_rows], labels[self.fit_rows])
        rows = self.holdout_rows if self.holdout_rows.size else self.fit_rows
        report = calibration_report(out.scores[rows], after[rows], labels[rows], out.failed[rows], threshold,
                                    self.cfg.n_bins)
        report.update(step=int(step), split="holdout" if self.holdout_rows.size else "fit", method=self.cfg.method)
        self.calibrator, self.threshold, self.last_step = calibrator, threshold, int(step)
        self.history.append(report)
        return report

    def score(self, prompts, responses) -> JudgeScores:
        if self.calibrator is None:
            raise ValueError("CalibratedJudge.score before the first calibration; call maybe_recalibrate(step)")
        out = self.judge.score(prompts, responses)
        return finish(self.counts, out.raw, self.calibrator(np.nan_to_num(out.raw)), out.texts)

    def state_dict(self) -> dict:
        return {"method": self.cfg.method, "last_step": self.last_step, "threshold": self.threshold,
                "map": None if self.calibrator is None else self.calibrator.state_dict(), "history": list(self.history),
                "counts": dict(self.counts)}

    def load_state_dict(self, state: dict) -> None:
        if state["method"] != self.cfg.method:
            raise ValueError(f"calibration state was fitted with {state['method']!r}, config says {self.cfg.method!r}")
        self.calibrator = None if state["map"] is None else calibrator_from_state(state["map"])
        self.threshold, self.last_step = float(state["threshold"]), state["last_step"]
        self.history, self.counts = list(state["history"]), dict(state["counts"])
