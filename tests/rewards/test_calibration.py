"""Calibration metrics against hand values, Platt / isotonic maps on synthetic judges with known truth, the
recalibration schedule and its checkpointable state."""
import itertools
import json

import numpy as np
import pytest

from rlpt.rewards.calibration import (
    IsotonicCalibration,
    PlattScaling,
    agreement,
    auc,
    brier,
    calibrator_from_state,
    ece,
    fit_threshold,
    make_calibrator,
)
from rlpt.rewards.judges import Judge, RewardModelJudge
from rlpt.rewards.recalibration import CalibratedJudge, CalibrationConfig, LabelledSet


def _synthetic(n, seed, scale=3.0, shift=2.0):
    """True P(y=1) = sigmoid(z); the judge reports the logit scale * z + shift (overconfident and biased)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float64)
    return scale * z + shift, y


def test_metrics_equal_hand_values():
    p, y = np.array([0.9, 0.8, 0.3, 0.1]), np.array([1.0, 0.0, 1.0, 0.0])
    assert brier(p, y) == pytest.approx((0.01 + 0.64 + 0.49 + 0.01) / 4)
    # Bins of width 0.5: {0.3, 0.1} mean 0.2 vs 0.5; {0.9, 0.8} mean 0.85 vs 0.5.
    assert ece(p, y, n_bins=2) == pytest.approx(0.5 * 0.3 + 0.5 * 0.35)
    assert ece(np.array([1.0, 0.0]), np.array([1.0, 0.0])) == 0.0  # p = 1 lands in the last bin
    # Pairs (pos, neg): (0.9, 0.8) ok, (0.9, 0.1) ok, (0.3, 0.8) wrong, (0.3, 0.1) ok.
    assert auc(p, y) == pytest.approx(0.75)
    assert agreement(p, y, threshold=0.5)["accuracy"] == pytest.approx(0.5)
    assert np.isnan(auc(p, np.ones(4)))


def test_auc_with_ties_equals_pair_count():
    rng = np.random.default_rng(3)
    s, y = rng.integers(0, 4, 60).astype(float), rng.integers(0, 2, 60).astype(float)
    pairs = [(a, b) for a, b in itertools.product(s[y == 1], s[y == 0])]
    want = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs])
    assert auc(s, y) == pytest.approx(want, abs=1e-12)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        brier([0.5], [2])
    with pytest.raises(ValueError, match="NaN"):
        ece([np.nan], [1])
    with pytest.raises(ValueError, match="equal-length"):
        auc([0.1, 0.2], [1])
    with pytest.raises(KeyError, match="unknown calibration method"):
        make_calibrator("histogram")


def test_platt_recovers_the_true_map_and_ece_drops_on_held_out_data():
    raw, y = _synthetic(20_000, seed=0)
    platt = PlattScaling().fit(raw, y)
    assert platt.a == pytest.approx(1 / 3, abs=0.03) and platt.b == pytest.approx(-2 / 3, abs=0.05)
    raw_t, y_t = _synthetic(5_000, seed=1)
    naive = 1 / (1 + np.exp(-raw_t))
    before, after = agreement(naive, y_t), agreement(platt(raw_t), y_t)
    assert before["ece"] > 0.15 and after["ece"] < 0.03
    assert after["brier"] < before["brier"] - 0.05
    assert after["auc"] == pytest.approx(before["auc"])  # a monotone map keeps the ranking


def test_platt_stays_finite_on_separable_data():
    raw, y = np.array([-2.0, -1.0, 1.0, 2.0]), np.array([0.0, 0.0, 1.0, 1.0])
    platt = PlattScaling().fit(raw, y)
    p = platt(raw)
    assert np.isfinite([platt.a, platt.b]).all()
    assert p[0] == pytest.approx(1 / 4, abs=0.05) and p[-1] == pytest.approx(3 / 4, abs=0.05)  # smoothed targets


def test_isotonic_is_pool_adjacent_violators():
    iso = IsotonicCalibration().fit([1, 2, 3, 4, 5], [0, 1, 0, 1, 1])
    np.testing.assert_allclose(iso([1, 2, 3, 4, 5]), [0, 0.5, 0.5, 1, 1])
    np.testing.assert_allclose(iso([0, 2.5, 10]), [0, 0.5, 1])  # flat inside a block and beyond the ends
    tied = IsotonicCalibration().fit([1, 1, 2, 2], [0, 1, 1, 1])
    np.testing.assert_allclose(tied([1, 2]), [0.5, 1.0])


def test_isotonic_is_monotone_calibrated_and_round_trips():
    raw, y = _synthetic(5_000, seed=2, scale=0.5, shift=-1.0)
    iso = IsotonicCalibration().fit(raw, y)
    grid = np.linspace(raw.min() - 1, raw.max() + 1, 500)
    assert (np.diff(iso(grid)) >= 0).all()
    raw_t, y_t = _synthetic(5_000, seed=4, scale=0.5, shift=-1.0)
    assert agreement(iso(raw_t), y_t)["ece"] < 0.04 < agreement(1 / (1 + np.exp(-raw_t)), y_t)["ece"]
    again = calibrator_from_state(json.loads(json.dumps(iso.state_dict())))
    np.testing.assert_array_equal(again(raw_t), iso(raw_t))


def test_threshold_maximises_accuracy():
    p, y = np.array([0.1, 0.2, 0.35, 0.4, 0.8, 0.9]), np.array([0, 0, 1, 1, 1, 1])
    t = fit_threshold(p, y)
    assert 0.2 < t <= 0.35 and np.mean((p >= t) == y) == 1.0
    assert fit_threshold(np.full(4, 0.9), np.array([0, 0, 0, 1])) > 0.9  # predict all 0
    rng = np.random.default_rng(5)
    for _ in range(100):  # against brute force over every distinct cut
        n = int(rng.integers(1, 30))
        p, y = rng.integers(0, 6, n) / 5, rng.integers(0, 2, n).astype(float)
        cuts = np.r_[np.unique(p), np.unique(p) + 1e-9, 0.5]
        best = max(np.mean((p >= c) == (y == 1)) for c in cuts)
        assert np.mean((p >= fit_threshold(p, y)) == (y == 1)) == pytest.approx(best)


class _ShiftingScorer:
    """A reward model whose logit scale drifts (as when it keeps training): raw = scale * z + shift."""

    def __init__(self, logits):
        self.logits, self.scale, self.shift, self.calls = logits, 3.0, 2.0, 0

    def __call__(self, prompts, responses):
        self.calls += 1
        return np.array([self.scale * self.logits[r] + self.shift for r in responses])


def _labelled(n, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(int)
    responses = [f"r{seed}_{i}" for i in range(n)]
    return LabelledSet(["p"] * n, responses, y), dict(zip(responses, z))


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_calibrated_judge_recalibrates_on_schedule_and_restores_state(method):
    fit, z_fit = _labelled(4000, seed=10)
    test, z_test = _labelled(3000, seed=11)
    scorer = _ShiftingScorer({**z_fit, **z_test})
    judge = CalibratedJudge(RewardModelJudge(scorer), fit, CalibrationConfig(method=method, every=100))
    assert isinstance(judge, Judge)  # registrable as a reward component
    with pytest.raises(ValueError, match="before the first calibration"):
        judge.score(["p"], ["r11_0"])
    first = judge.maybe_recalibrate(0)
    assert first["after"]["ece"] < first["before"]["ece"] - 0.1
    labels = test.labels.astype(float)

    def test_ece():
        return ece(judge.score(test.prompts, test.responses).scores, labels)

    assert test_ece() < 0.04
    scorer.scale, scorer.shift = 8.0, -3.0  # the judge drifts
    assert judge.maybe_recalibrate(50) is None and judge.last_step == 0  # not due yet
    stale_scores = judge.score(test.prompts, test.responses).scores
    stale = test_ece()
    assert stale > 0.05
    state = json.loads(json.dumps(judge.state_dict()))  # plain JSON: goes into a checkpoint as is
    assert judge.maybe_recalibrate(100)["step"] == 100
    assert test_ece() < 0.04 < stale
    restored = CalibratedJudge(RewardModelJudge(scorer), fit, CalibrationConfig(method=method, every=100))
    restored.load_state_dict(state)
    assert restored.last_step == 0 and not restored.due(99) and restored.due(100)
    np.testing.assert_allclose(restored.score(test.prompts, test.responses).scores, stale_scores)


def test_calibrated_judge_keeps_failures_out_of_the_fit_and_reports_holdout():
    fit, z = _labelled(2000, seed=20)
    bad = set(fit.responses[:100])

    def scorer(prompts, responses):
        return np.array([np.nan if r in bad else 2 * z[r] for r in responses])

    judge = CalibratedJudge(RewardModelJudge(scorer), fit, CalibrationConfig(method="platt", holdout_fraction=0.25))
    report = judge.maybe_recalibrate(0)
    assert report["split"] == "holdout" and report["after"]["n"] == 500
    assert 0 < report["failed"] < 100
    out = judge.score(fit.prompts[:3], fit.responses[:3])
    assert out.failed.all() and (out.scores == 0).all() and judge.counts["failed"] == 3
    assert judge.state_dict()["map"]["a"] == pytest.approx(0.5, abs=0.1)  # true logit = raw / 2
    with pytest.raises(ValueError, match="fitted with 'platt'"):
        CalibratedJudge(RewardModelJudge(scorer), fit, CalibrationConfig(method="isotonic")).load_state_dict(
            judge.state_dict())


def test_labelled_set_from_tasks_is_labelled_by_the_verifier():
    import random

    from rlpt.tasks import get_domain
    from rlpt.tasks.labelled import corrupt, labelled_from_tasks

    rng = random.Random(0)
    assert all(corrupt(a, rng) != a for a in ["42", "-7", "1 2 3", "abc", "x"] * 20)
    tasks = [get_domain(d).generate(s, 2) for d in ("arith/add", "list/sort", "str/reverse") for s in range(10)]
    lab, domains = labelled_from_tasks(tasks, corruptions=3, seed=1)
    assert len(lab.labels) == len(domains) == 4 * len(tasks)
    for i, task in enumerate(tasks):
        group = range(4 * i, 4 * i + 4)
        assert lab.responses[4 * i] == task.meta["answer"] and lab.labels[4 * i] == 1
        assert len({lab.responses[j] for j in group}) == 4
        for j in group:
            assert lab.labels[j] == get_domain(task.domain).verify(task, lab.responses[j]).passed
    assert lab.labels.mean() < 0.5


def test_judge_calibration_script_reports_improvement():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, os.path.join(root, "scripts", "judge_calibration.py"), "--tasks", "40"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert "| isotonic" in out and report["n_heldout"] == 5 * 40 * 4
    assert report["isotonic"]["ece"] < report["before"]["ece"] - 0.2
    assert report["isotonic"]["brier"] < report["before"]["brier"]
    assert report["drift"]["refit_ece"] < report["drift"]["stale_map_ece"]
