"""Observers: TensorBoard events, health rates, failure tags, trajectory log rotation, failure records."""
import glob
import gzip
import json
import os

import numpy as np
import pytest

from rlpt.config import compose
from rlpt.observe.alerts import register_alert_hook
from rlpt.observe.observers import default_observers
from rlpt.observe.tags import sample_tags, task_outcomes
from rlpt.observe.trajectory_log import TrajectoryLog, log_files, read_trajectories
from tests.observe.helpers import make_traj, row_of

SPECS = [("arith/add", 2, 5, ["gold", "wrong", "empty", "long"]), ("list/sort", 1, 9, ["verr", "sbox", "gold", "gold"]),
         ("arith/add", 2, 6, ["gold", "gold", "gold", "gold"])]


def test_failure_tags_and_outcomes():
    traj = make_traj(SPECS)
    assert sample_tags(traj) == ["passed", "wrong_answer", "empty", "truncated", "verifier_error", "sandbox_error",
                                 "passed", "passed", "passed", "passed", "passed", "passed"]
    # majority failure tag per task, ties by precedence (empty before truncated before wrong_answer)
    assert task_outcomes(traj, 4) == [("arith/add", 2, 5, 0.25, "empty"), ("list/sort", 1, 9, 0.5, "sandbox_error"),
                                      ("arith/add", 2, 6, 1.0, "passed")]


def _events(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(logdir, size_guidance={"tensors": 0, "histograms": 0, "scalars": 0})
    acc.Reload()
    return acc.Tags()


def test_default_observers_write_everything(tmp_path):
    cfg = compose(["observe.samples_every=1", "observe.drift_window=2", "observe.drift_baseline=2",
                   "observe.drift_min_samples=4"])
    obs = default_observers(cfg, str(tmp_path))
    for step in range(1, 7):
        # the arith/add tasks all fail from step 5 on: a reward shift the drift observer must flag
        specs = SPECS if step < 5 else [(d, t, s, ["wrong"] * 4) if d == "arith/add" else (d, t, s, k)
                                        for d, t, s, k in SPECS]
        traj = make_traj(specs, seed=step)
        row = row_of(traj, step)
        for o in obs:
            o.on_step(step, traj, row)
        assert row["pass/list/sort"] == 0.5 and row["pass/arith/add"] == (5 / 8 if step < 5 else 0.0)
    summary = {}
    for o in obs:
        summary |= o.close()
    assert summary["verifier_error_rate"] == pytest.approx(1 / 12)
    assert summary["sandbox_error_rate"] == pytest.approx(1 / 12)
    assert summary["trajectories_logged"] == 6 * 12
    assert summary["drift_alerts"] >= 1 and min(summary["drift_alert_steps"]) >= 5
    alerts = [json.loads(line) for line in open(tmp_path / "alerts.jsonl")]
    assert alerts[0]["domain"] == "arith/add" and alerts[0]["kind"] == "reward_drift"
    assert 0 < summary["trainer_util"] <= 1 and 0 < summary["sampler_util"] <= 1
    tags = _events(str(tmp_path / "tb"))
    assert {"reward_mean", "util/trainer", "verifier/error_rate", "sandbox/error_rate", "drift/ks/arith/add"} \
        <= set(tags["scalars"])
    assert {"reward_hist/arith/add", "reward_hist/list/sort"} <= set(tags["histograms"])
    assert {"samples", "alerts/reward_drift"} <= set(tags["tensors"])
    recs = read_trajectories(str(tmp_path / "trajectories"))
    assert len(recs) == 72 and recs[0]["task_id"] == "arith/add:t2:s5" and recs[1]["tag"] == "wrong_answer"
    assert all(len(r["response_ids"]) >= 1 for r in recs)
    failures = [json.loads(line) for p in glob.glob(str(tmp_path / "failures" / "*.jsonl")) for line in open(p)]
    assert {f["task_id"] for f in failures} == {"arith/add:t2:s5", "list/sort:t1:s9", "arith/add:t2:s6"}
    late = [f for f in failures if f["task_id"] == "arith/add:t2:s6"]
    assert len(late) == 2 and all(f["tag"] == "wrong_answer" and f["pass_rate"] == 0 for f in late)
    first = next(f for f in failures if f["task_id"] == "list/sort:t1:s9")
    assert first["seed"] == 9 and first["tags"] == {"passed": 2, "sandbox_error": 1, "verifier_error": 1}
    assert [r["text"] for r in first["responses"]] == ["7", "7"]  # the verifier-error suffix is stripped


def test_trajectory_log_rotates_and_keeps_last_files(tmp_path):
    log = TrajectoryLog(str(tmp_path), max_bytes=300, max_files=3)
    rng = np.random.default_rng(0)
    for i in range(40):
        log.write([{"i": i, "noise": rng.integers(0, 1 << 30, size=8).tolist()}])
    log.close()
    files = log_files(str(tmp_path))
    assert len(files) == 3 and all(f.endswith(".jsonl.gz") for f in files)
    for f in files:
        with open(f, "rb") as fh:
            assert fh.read(2) == b"\x1f\x8b"  # gzip magic
        with gzip.open(f, "rt") as fh:
            fh.read()  # each file is a complete gzip stream
    got = [r["i"] for r in read_trajectories(str(tmp_path))]
    assert got == list(range(got[0], 40)) and got[0] > 0  # the oldest were rotated away, order kept
    again = TrajectoryLog(str(tmp_path), max_bytes=300, max_files=3)  # a resumed run appends a new file
    again.write([{"i": 40}])
    again.close()
    assert read_trajectories(str(tmp_path))[-1] == {"i": 40} and len(log_files(str(tmp_path))) == 3


def test_alert_hooks_by_name(tmp_path):
    with pytest.raises(KeyError, match="observe.alert_hooks"):
        default_observers(compose(["observe.alert_hooks=[nope]"]), str(tmp_path / "a"))
    seen = []
    register_alert_hook("test_collect")(seen.append)
    cfg = compose(["observe.alert_hooks=[test_collect]", "observe.drift_window=1", "observe.drift_baseline=2",
                   "observe.drift_min_samples=4", "observe.tensorboard=false", "observe.trajectory_log=false",
                   "observe.failures=false"])
    obs = default_observers(cfg, str(tmp_path / "b"))
    for step, kind in enumerate(["gold", "gold", "gold", "wrong", "wrong"], 1):
        traj = make_traj([("arith/add", 2, 5, [kind] * 4), ("arith/add", 2, 6, [kind] * 4)])
        for o in obs:
            o.on_step(step, traj, row_of(traj, step))
    for o in obs:
        o.close()
    got = [(r["step"], r["domain"], r["baseline_mean"], r["window_mean"]) for r in seen]
    assert got == [(4, "arith/add", 1.0, 0.0)]
    assert os.path.exists(tmp_path / "b" / "alerts.jsonl") and not os.path.exists(tmp_path / "b" / "tb")
