"""Has a pulse: the quickstart (SFT cold start -> GRPO) and async mode run end to end on tiny settings."""
import json
import os

from rlpt.config import compose
from rlpt.pipeline.quickstart import run

TINY = ["rl.sft_steps=4", "rl.steps=3", "rl.eval_per_domain=8", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=4", "data.batch_size=8", "model.hidden_size=32", "model.intermediate_size=64",
        "train.ckpt_every=2", "train.progress=false"]


def test_quickstart_pulse(tmp_path, capsys):
    cfg = compose(TINY + [f"train.out_dir={tmp_path}"])
    summary = run(cfg)
    for key in ("base_pass1", "sft_pass1", "rl_pass1", "wall_s", "trainer_idle_fraction"):
        assert key in summary
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last)["rl_pass1"] == summary["rl_pass1"]
    for png in ("eval.png", "reward.png", "kl.png", "time_split.png"):
        with open(tmp_path / png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    report = (tmp_path / "report.md").read_text()
    assert "held-out pass@1" in report.lower() and "![reward](reward.png)" in report
    assert os.listdir(tmp_path / "rl" / "checkpoints")
    assert os.listdir(tmp_path / "rl" / "tb") and os.listdir(tmp_path / "tb")
