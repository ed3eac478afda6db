"""Drift detection: KS / PSI values, alert delay after a simulated shift, quiet on stationary streams."""
import numpy as np
import pytest

from rlpt.observe.drift import DriftDetector, ks_statistic, psi
from rlpt.observe.drift_sim import Scenario, run_scenario


def test_ks_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for a, b in [(rng.normal(size=50), rng.normal(0.5, size=70)), (rng.integers(0, 3, 40), rng.integers(0, 3, 90)),
                 (rng.random(5), rng.random(200))]:
        assert ks_statistic(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)


def test_psi_known_values():
    a = np.array([0.0] * 70 + [1.0] * 30)
    b = np.array([0.0] * 40 + [1.0] * 60)
    # two occupied bins: (0.6 - 0.3) ln(0.6/0.3) + (0.4 - 0.7) ln(0.4/0.7)
    assert psi(a, b, bins=2, eps=0.0) == pytest.approx(0.3 * np.log(2) - 0.3 * np.log(4 / 7))
    assert psi(a, a) == pytest.approx(0.0, abs=1e-12)
    assert psi(np.ones(10), np.ones(5)) == 0.0
    with pytest.raises(ValueError, match="non-empty"):
        psi([], [1.0])


def _make(**kw):
    args = dict(window=8, baseline=32, min_samples=32, bins=10, ks_threshold=0.25, psi_threshold=0.25) | kw
    return lambda: DriftDetector(**args)


def test_alerts_within_window_after_a_shift():
    # A 0.6 -> 0.1 pass-rate collapse at 256 rewards per step is flagged within drift_window (8) steps, every seed.
    r = run_scenario(Scenario("collapse", 0.6, 0.1, shift_at=60, steps=80), _make(), seeds=20)
    assert r["detected"] == 1.0 and r["delay_max"] <= 8 and r["false_alerts"] == 0
    # A smaller 0.6 -> 0.3 drop at 32 rewards per step: still every seed, within 2 windows.
    r = run_scenario(Scenario("drop", 0.6, 0.3, shift_at=60, n=32, steps=90), _make(), seeds=20)
    assert r["detected"] == 1.0 and r["delay_max"] <= 16


def test_quiet_on_stationary_and_learning_streams():
    for sc in (Scenario("flat", 0.5, n=32, steps=200), Scenario("learn", 0.2, slope=0.002, steps=200)):
        r = run_scenario(sc, _make(), seeds=20)
        assert r["false_alerts"] == 0, r


def test_one_alert_per_shift_then_new_baseline():
    det = _make(window=2, baseline=4, min_samples=8)()
    rng = np.random.default_rng(0)
    alerts = []
    for step in range(40):
        p = 0.9 if step < 20 else 0.1
        alerts += det.update(step, {"a": rng.random(64) < p, "b": rng.random(64) < 0.5})
    assert len(alerts) == 1 and alerts[0].domain == "a" and alerts[0].step in (20, 21)
    assert alerts[0].baseline_mean > 0.8 and alerts[0].window_mean < 0.6
    with pytest.raises(ValueError, match="drift_window"):
        DriftDetector(window=0, baseline=4, min_samples=1, bins=10, ks_threshold=0.1, psi_threshold=0.1)


def test_simulation_script_last_line_json():
    import json
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "drift_simulation.py")
    res = subprocess.run([sys.executable, script, "--seeds", "2", "observe.drift_window=4"], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["benchmark"] == "drift_simulation" and out["settings"]["drift_window"] == 4
    by_name = {r["scenario"]: r for r in out["results"]}
    assert by_name["collapse 0.6->0.1"]["detected"] == 1.0 and by_name["stationary 0.5"]["false_alerts"] == 0
