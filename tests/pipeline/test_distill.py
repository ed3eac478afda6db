"""Issue #31: stage=distill end to end on tiny settings (on-policy and logit distillation, resume, bad teachers)."""
import dataclasses
import json

import pytest

from rlpt.config import compose
from rlpt.models import init_model
from rlpt.pipeline.distill import run
from rlpt.train.sft import get_tokenizer
from rlpt.train.source import export_checkpoint

TINY = ["stage=distill", "rl.sft_steps=0", "rl.eval_per_domain=8", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=2", "data.batch_size=8", "model.hidden_size=32", "model.intermediate_size=64",
        "model.num_layers=1", "train.ckpt_every=2", "train.progress=false", "train.eval_every=2"]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    cfg = compose(TINY)
    folder = str(tmp_path_factory.mktemp("teacher"))
    export_checkpoint(init_model(dataclasses.replace(cfg.model, num_layers=2), 7), get_tokenizer(cfg), folder)
    return folder


def _rows(path):
    return [json.loads(line) for line in open(path)]


@pytest.mark.parametrize("mode", ["on_policy", "logit", pytest.param("teacher", marks=pytest.mark.slow)])
def test_distill_runs_and_resumes(tmp_path, capsys, teacher_dir, mode, shared_compiles):
    out = tmp_path / "run"
    chosen = ["distill.mode=logit", "distill.sequences=teacher"] if mode == "teacher" else [f"distill.mode={mode}"]
    args = TINY + chosen + [f"distill.teacher={teacher_dir}", f"train.out_dir={out}"]
    summary = run(compose(args + ["train.steps=3"]))
    assert summary["stage"] == "distill" and summary["teacher_layers"] == 2 and summary["student_layers"] == 1
    for key in ("teacher_pass1", "student_before_pass1", "student_after_pass1", "recovered", "wall_s"):
        assert key in summary
    assert list(summary["curve"]) == ["0", "2", "3"]
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["student_after_pass1"] == summary["student_after_pass1"]
    rows = _rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["divergence"] > 0 for r in rows)
    assert ("sample_reward" in rows[0]) == (mode != "logit")
    # resume: one more step continues from the step-3 checkpoint
    summary = run(compose(args + ["train.steps=4"]))
    assert [r["step"] for r in _rows(out / "metrics.jsonl")] == [1, 2, 3, 4]
    assert list(summary["curve"]) == ["0", "2", "4"]


def test_bad_teacher_is_named(tmp_path):
    with pytest.raises(ValueError, match="distill.teacher=.*no config.json"):
        run(compose(TINY + [f"distill.teacher={tmp_path}", f"train.out_dir={tmp_path / 'run'}"]))
    with pytest.raises(ValueError, match="distill.teacher_model='nope'.*known"):
        run(compose(TINY + ["distill.teacher_model=nope", f"train.out_dir={tmp_path / 'run2'}"]))


def test_teacher_preset_is_what_model_group_composes():
    from rlpt.config.schema import model_preset

    assert model_preset("tiny") == compose([]).model
    assert model_preset("qwen3_tiny") == compose(["model=qwen3_tiny"]).model
