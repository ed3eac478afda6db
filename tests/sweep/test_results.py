"""rlpt.sweep on hand-made multirun folders: loading, grouping, the table against hand-computed numbers, the
paired-by-seed comparison, summary files, the CLI and the Hydra callback."""
import csv
import json
import statistics
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

import rlpt.sweep
from rlpt.eval.stats import bootstrap_mean
from rlpt.sweep.__main__ import main
from rlpt.sweep.callback import SummarizeSweep
from rlpt.sweep.results import lower_is_better, parse_overrides, read_log

BASE = [0.1, 0.5, 0.3, 0.7, 0.2]  # reward=a's pass1 per seed
NOISE = [0.1, -0.1, 0.05, -0.05, 0.0]  # reward=c = a + noise; reward=b = a + 0.3
FAILED, MISSING = 14, 13  # reward=c's seeds 4 and 3


def _job(root, num, overrides, summary=None, failed=None, logs=None):
    job = root / str(num)
    (job / "hydra").mkdir(parents=True)
    (job / "hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if summary is not None:
        (job / "summary.json").write_text(json.dumps(summary))
    if failed is not None:
        (job / "failed.json").write_text(json.dumps(failed))
    for rel, rows in (logs or {}).items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))


def fake_sweep(root):
    """reward=a,b,c x train.seed=0..4 (job n = 5 * reward + seed); c's seed 3 is still running, seed 4 failed."""
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for r, reward in enumerate("abc"):
        shift = {"a": [0.0] * 5, "b": [0.3] * 5, "c": NOISE}[reward]
        for seed in range(5):
            num = 5 * r + seed
            over = ["experiment=quickstart", f"reward={reward}", f"train.seed={seed}"]
            if num == FAILED:
                _job(root, num, over, failed={"error": "out of memory\nmore", "type": "RuntimeError",
                                              "traceback": "..."})
                continue
            if num == MISSING:
                _job(root, num, over)
                continue
            p = BASE[seed] + shift[seed]
            rl = [{"step": s, "reward_mean": p * s / 3, "pass_rate": p} for s in (1, 2, 3)]
            if num == 0:  # resumed: step 2 logged twice, the later row wins
                rl.insert(2, {"step": 2, "reward_mean": 99.0, "pass_rate": 99.0})
                rl[1], rl[2] = rl[2], rl[1]
            summary = {"rl_pass1": p, "final_loss": 1.0 - p, "wall_s": 10.0 + seed, "run": "x", "nested": {"a": 1},
                       "flag": True}
            _job(root, num, over, summary, logs={"rl/metrics.jsonl": rl,
                                                 "metrics.jsonl": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]})
    return root


@pytest.fixture
def sweep_dir(tmp_path):
    return fake_sweep(tmp_path / "sweep")


def test_parse_overrides_and_direction_rule():
    assert parse_overrides(["a=1", "+b.c=x y", "++d=[1,2]", "~e", "f=g=h"]) == \
        {"a": "1", "b.c": "x y", "d": "[1,2]", "e": "~", "f": "g=h"}
    with pytest.raises(ValueError, match="'oops' is not key=value"):
        parse_overrides(["oops"])
    names = ("final_loss", "wall_s", "response_len", "length", "rl_pass1", "steps", "reward/challenge", "tokens_per_s")
    assert [lower_is_better(k) for k in names] == [True, True, True, True, False, False, False, False]


def test_load_statuses_groups_and_logs(sweep_dir):
    sweep = rlpt.sweep.load(str(sweep_dir))
    assert [j.num for j in sweep.jobs] == list(range(15))
    assert {j.num: j.status for j in sweep.jobs if j.status != "ok"} == {MISSING: "missing", FAILED: "failed"}
    assert sweep.jobs[FAILED].error == "RuntimeError: out of memory"
    assert sweep.jobs[7].overrides == {"experiment": "quickstart", "reward": "b", "train.seed": "2"}
    configs = sweep.configs()
    assert [c.label for c in configs] == ["reward=a", "reward=b", "reward=c"]
    assert [len(c.jobs) for c in configs] == [5, 5, 5] and configs[2].overrides == {"reward": "c"}
    assert sweep.metric_names() == ["rl_pass1", "final_loss", "wall_s"]  # numeric scalars only
    logs = sweep.jobs[0].metrics()
    assert sorted(logs) == ["metrics.jsonl", "rl/metrics.jsonl"]
    rl = logs["rl/metrics.jsonl"]
    assert [r["step"] for r in rl] == [1, 2, 3] and rl[1]["pass_rate"] == 0.1
    assert sweep.jobs[0].metrics("sft/metrics.jsonl") == {}
    # seeds are not a configuration: grouped by everything, seeds included, each job is its own
    assert len(sweep.configs(seed_keys=())) == 15


def test_read_log_drops_a_cut_last_line_and_names_a_bad_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 2, "loss": 1}\n{"step": 1, "loss": 3}\n{"step": 2, "loss": 0.5}\n{"step": 3, "lo')
    assert read_log(str(path)) == [{"step": 1, "loss": 3}, {"step": 2, "loss": 0.5}]
    path.write_text('{"step": 1\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:1: not valid JSON"):
        read_log(str(path))


def test_table_matches_hand_computed_statistics(sweep_dir):
    table = rlpt.sweep.load(str(sweep_dir)).table(resamples=500)
    a, b, c = table
    assert (a["config"], a["reward"], a["ok"], a["failed"], a["missing"]) == ("reward=a", "a", 5, 0, 0)
    assert (c["ok"], c["failed"], c["missing"]) == (3, 1, 1)
    for row, vals in ((a, BASE), (b, [x + 0.3 for x in BASE]), (c, [x + n for x, n in zip(BASE[:3], NOISE)])):
        assert row["rl_pass1.mean"] == pytest.approx(statistics.mean(vals))
        assert row["rl_pass1.std"] == pytest.approx(statistics.stdev(vals))
        assert row["rl_pass1.n"] == len(vals)
        assert row["rl_pass1.low"] <= row["rl_pass1.mean"] <= row["rl_pass1.high"]
        assert min(vals) - 1e-12 <= row["rl_pass1.low"] and row["rl_pass1.high"] <= max(vals) + 1e-12
    assert a["wall_s.mean"] == pytest.approx(12.0)
    one = bootstrap_mean([0.25])
    assert (one.mean, one.low, one.high, one.n) == (0.25, 0.25, 0.25, 1)
    assert bootstrap_mean([1.0, 2.0, 4.0], resamples=300, seed=3) == bootstrap_mean([1.0, 2.0, 4.0], resamples=300,
                                                                                    seed=3)


def test_comparison_is_significant_for_a_clear_gain_and_not_for_noise(sweep_dir):
    sweep = rlpt.sweep.load(str(sweep_dir))
    rows = {(r["config"], r["metric"]): r for r in sweep.compare(resamples=500)}
    gain = rows["reward=b", "rl_pass1"]
    assert gain["baseline"] == "reward=a" and gain["n"] == 5
    assert gain["delta"] == pytest.approx(0.3) and gain["significant"] and gain["better"]
    loss = rows["reward=b", "final_loss"]  # lower is better: a significant drop is better
    assert loss["delta"] == pytest.approx(-0.3) and loss["significant"] and loss["better"]
    noise = rows["reward=c", "rl_pass1"]
    assert noise["n"] == 3 and noise["low"] < 0 < noise["high"] and not noise["significant"]
    assert not rows["reward=b", "wall_s"]["significant"]  # identical per seed: delta 0
    # the baseline by label or by overrides; the gain flips sign
    back = {(r["config"], r["metric"]): r for r in sweep.compare(baseline="reward=b", resamples=500)}
    assert back["reward=a", "rl_pass1"]["significant"] and not back["reward=a", "rl_pass1"]["better"]
    assert sweep.compare(baseline={"reward": "b"}, resamples=50) == sweep.compare(baseline="reward=b", resamples=50)
    with pytest.raises(ValueError, match="matches 0 configurations"):
        sweep.compare(baseline="reward=z")


def test_summarize_writes_md_csv_and_plots(sweep_dir):
    out = rlpt.sweep.summarize(str(sweep_dir), metrics=["rl_pass1", "final_loss"], resamples=300)
    md = (sweep_dir / "summary.md").read_text()
    assert out["summary_md"] == str(sweep_dir / "summary.md") and (out["ok"], out["failed"]) == (13, 1)
    assert f"job {FAILED} (`{sweep_dir / str(FAILED)}`): RuntimeError: out of memory" in md
    assert f"job {MISSING} (" in md and "experiment=quickstart" in md
    assert "`rl_pass1` (higher is better): `reward=b`" in md and "`final_loss` (lower is better): `reward=b`" in md
    assert "| reward=b | rl_pass1 | 5 |" in md and "better |" in md
    with open(out["summary_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert [r["config"] for r in rows] == ["reward=a", "reward=b", "reward=c"]
    assert float(rows[0]["rl_pass1.mean"]) == pytest.approx(statistics.mean(BASE))
    names = sorted(p.rsplit("/", 1)[1] for p in out["plots"])
    assert names == ["bar_final_loss.png", "bar_rl_pass1.png", "curve_rl_pass_rate.png", "curve_rl_reward_mean.png",
                     "curve_root_loss.png"]
    assert all((sweep_dir / n).stat().st_size > 1000 and f"]({n})" in md for n in names)
    first = (sweep_dir / "summary.csv").read_text()
    rlpt.sweep.summarize(str(sweep_dir), metrics=["rl_pass1", "final_loss"], resamples=300, plots=False)
    assert (sweep_dir / "summary.csv").read_text() == first  # seeded: the same numbers again
    with pytest.raises(ValueError, match=r"metrics \['nope'\] are in no ok job"):
        rlpt.sweep.summarize(str(sweep_dir), metrics=["nope"])


def test_one_job_and_all_failed(tmp_path):
    _job(tmp_path / "one", 0, ["experiment=sft_tiny"], {"final_loss": 0.5, "steps": 3})
    out = rlpt.sweep.summarize(str(tmp_path / "one"), resamples=10, plots=False)
    (row,) = out["table"]
    assert row["config"] == "experiment=sft_tiny" and row["final_loss.std"] == 0.0 and out["comparison"] == []
    _job(tmp_path / "bad", 0, ["train.seed=0"], failed={"error": "boom", "type": "ValueError"})
    out = rlpt.sweep.summarize(str(tmp_path / "bad"), plots=False)
    assert out["metrics"] == [] and out["table"][0]["failed"] == 1 and out["table"][0]["config"] == "default"


def test_cli(sweep_dir, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "rlpt.sweep", "summarize", str(tmp_path / "empty")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == \
        [f"rlpt.sweep: error: no job folders (0/, 1/, ...) in sweep folder {tmp_path / 'empty'}"]
    assert main(["summarize", str(sweep_dir), "--metrics", "rl_pass1", "--baseline", "reward=c", "--curves",
                 "loss", "--resamples", "100"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == {"sweep": str(sweep_dir), "jobs": 15, "ok": 13, "failed": 1, "missing": 1,
                    "summary_md": str(sweep_dir / "summary.md")}
    assert "Against the baseline `reward=c`" in (sweep_dir / "summary.md").read_text()
    assert main(["summarize", str(sweep_dir), "--baseline", "reward=z"]) == 2


def test_callback_fails_the_sweep_when_a_job_failed(sweep_dir, tmp_path, capsys):
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    with pytest.raises(SystemExit) as e:
        SummarizeSweep(metrics=["rl_pass1"], resamples=50).on_multirun_end(cfg, config_name="config")
    assert e.value.code == 1
    out = capsys.readouterr().out
    assert f"job {FAILED} failed" in out and "out of memory" in out and str(sweep_dir / "summary.md") in out
    _job(tmp_path / "good", 0, ["train.seed=0"], {"final_loss": 0.5})
    good = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "good")}}})
    SummarizeSweep(resamples=10).on_multirun_end(good)  # no failed job: no SystemExit
    assert (tmp_path / "good" / "summary.md").exists()
