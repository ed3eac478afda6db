"""The notebook API: rlpt.compose / rlpt.run / rlpt.evaluate, in this interpreter (no Hydra, no re-exec)."""
import json

import pytest

import rlpt


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "run"
    return rlpt.run(rlpt.compose(["experiment=sft_tiny", "train.steps=3", "train.eval_every=0",
                                  f"train.out_dir={out}"]))


def test_run_returns_the_summary_metrics_and_policy(result):
    with open(result.paths["summary"]) as f:
        assert json.load(f) == result.summary
    assert result.summary["steps"] == 3 and result.summary["stage"] == "sft"
    assert result.config.train.steps == 3 and result.out_dir.endswith("run")
    rows = result.metrics()["metrics.jsonl"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["loss"] == pytest.approx(result.summary["final_loss"])
    assert result.metrics_frame().shape[0] == 3
    assert result.model is not None and result.tokenizer is not None and "history" in result.objects
    assert {"config", "checkpoints", "metrics.jsonl"} <= set(result.paths)
    with pytest.raises(KeyError, match="no such metrics log"):
        result.metrics("rl/metrics.jsonl")


def test_evaluate_in_memory_equals_the_checkpoint_folder(result, tmp_path):
    mem = rlpt.evaluate(result, suite="quickstart", limit=8, out=str(tmp_path / "mem"))
    assert mem["n"] == 8 and 0.0 <= mem["pass1"] <= 1.0
    oracle = rlpt.evaluate("oracle", suite="quickstart", limit=8, out=str(tmp_path / "oracle"))
    assert oracle["pass1"] == 1.0
    with pytest.raises(ValueError, match="tokenizer="):
        rlpt.evaluate(result.model, suite="quickstart", limit=8)


def test_run_refuses_what_the_cli_refuses(tmp_path):
    from rlpt.config.validate import ConfigError
    from rlpt.train.checkpoint import RunFolderError

    with pytest.raises(ConfigError, match="optim.lr"):
        rlpt.compose(["experiment=sft_tiny", "optim.lr=-1"])
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "note.txt").write_text("keep me")
    with pytest.raises(RunFolderError, match="not empty"):
        rlpt.run(["experiment=sft_tiny", f"train.out_dir={tmp_path / 'x'}", "train.resume=never"])
    assert (tmp_path / "x" / "note.txt").read_text() == "keep me"


def test_slurm_launcher_composes():
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "rlpt.train", "hydra/launcher=submitit_slurm",
                           "hydra.launcher.partition=gpu", "sweep=ablate_rewards", "--cfg", "hydra"],
                          cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SlurmLauncher" in proc.stdout and "partition: gpu" in proc.stdout
    assert "reward: correctness,layered,short" in proc.stdout
