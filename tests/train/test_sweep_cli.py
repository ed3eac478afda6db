"""`python -m rlpt.train -m ...`: every job checked before the first starts, each job in its own folder, a failed
job recorded while the sweep goes on, the summary written at the end and a non-zero exit."""
import json
import os
import subprocess
import sys

import pytest

from rlpt.train.preflight import check_sweep, sweep_jobs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "rlpt.train", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def test_sweep_expansion_matches_hydra():
    jobs, name = sweep_jobs(["-m", "experiment=sft_tiny", "reward=correctness,short", "train.seed=range(2)",
                             "hydra.sweep.dir=x"])
    assert name == "config"
    assert [j[1:] for j in jobs] == [["reward=correctness", "train.seed=0"], ["reward=correctness", "train.seed=1"],
                                     ["reward=short", "train.seed=0"], ["reward=short", "train.seed=1"]]
    assert sweep_jobs(["experiment=sft_tiny"]) is None  # not a sweep


@pytest.mark.parametrize("override, words", [
    ("train.sed=0,1", "Could not override 'train.sed'"),
    ("reward=short,layerd", "Could not find 'reward/layerd'"),
    ("optim.lr=1e-3,-1", "optim.lr=-1"),
])
def test_typo_in_a_sweep_fails_before_any_job_naming_the_key(override, words):
    from rlpt.config.validate import ConfigError

    with pytest.raises(ConfigError, match="sweep job [01] .*" + words.replace("(", r"\(").replace(".", r"\.")):
        check_sweep(["-m", "experiment=sft_tiny", "train.steps=2", override])


def test_jobs_sharing_an_explicit_out_dir_are_refused(tmp_path):
    from rlpt.config.validate import ConfigError

    with pytest.raises(ConfigError, match="sweep jobs 0 and 1 share train.out_dir"):
        check_sweep(["-m", "experiment=sft_tiny", f"train.out_dir={tmp_path}", "train.seed=0,1"])
    assert check_sweep(["-m", "experiment=sft_tiny", "train.seed=0,1,2"]) == 3


def test_cli_typo_exits_2_and_starts_nothing(tmp_path):
    proc = _cli("-m", "experiment=sft_tiny", "train.steps=2", "train.sed=0,1", f"hydra.sweep.dir={tmp_path / 's'}")
    assert proc.returncode == 2, proc.stderr
    assert "rlpt.train: error: sweep job 0" in proc.stderr and "train.sed" in proc.stderr
    assert not (tmp_path / "s").exists()


def test_sweep_jobs_own_folders_failure_recorded_and_summarized(tmp_path):
    sweep = tmp_path / "sweep"
    # data.seq_len=4 leaves no trainable token: job 0 fails at data loading, job 1 trains
    proc = _cli("-m", "experiment=sft_tiny", "train.steps=2", "data.seq_len=4,64", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = json.loads((sweep / "0" / "failed.json").read_text())
    assert failed["type"] == "DataError" and "data.seq_len=4" in failed["error"]
    assert not (sweep / "0" / "summary.json").exists()
    summary = json.loads((sweep / "1" / "summary.json").read_text())
    assert summary["run_dir"] == str(sweep / "1") and summary["steps"] == 2 and "compile_s" in summary
    assert (sweep / "1" / "metrics.jsonl").exists() and (sweep / "1" / "checkpoints").is_dir()
    md = (sweep / "summary.md").read_text()
    assert "failed 1" in md and "data.seq_len=64" in md
    assert (sweep / "summary.csv").exists()
    assert "[sweep] job 0 failed" in proc.stdout
