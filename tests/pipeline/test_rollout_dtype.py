"""rl.rollout.compute_dtype: the sampler runs the trainer's float32 weights at another compute dtype."""
import numpy as np
import pytest

from rlpt.config import compose
from rlpt.pipeline.producer import rollout_model

TINY = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=4", "domains.include=[arith/add]", "train.ckpt_every=0", "train.progress=false",
        "rl.rollout.max_new_tokens=6", "rl.rollout.max_prompt_len=24", "rl.steps=2"]


def _run(tmp_path, dtype):
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.pipeline.rl import run_rl
    from rlpt.rollout.single_turn import rollout

    seen = []

    def spy(model, *args, **kw):
        seen.append(model.config.compute_dtype)
        return rollout(model, *args, **kw)

    cfg = compose(TINY + [f"rl.rollout.compute_dtype={dtype}"])
    out = run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(tmp_path / str(dtype)),
                 rollout_fn=spy)
    return seen, out


def test_bf16_rollouts_from_f32_trainer(tmp_path):
    seen, out = _run(tmp_path, "bfloat16")
    assert seen == ["bfloat16", "bfloat16"]
    assert out["model"].config.compute_dtype == "float32"  # the trainer and its checkpoints stay float32
    gap_bf16 = np.mean([abs(h["logp_gap"]) for h in out["history"]])
    seen, out = _run(tmp_path, "null")
    assert seen == ["float32", "float32"]
    gap_f32 = np.mean([abs(h["logp_gap"]) for h in out["history"]])
    # the rollout / trainer log-prob gap is the bf16 sampler's rounding, reported in the metrics
    assert gap_f32 < 1e-5 < gap_bf16 < 0.5, (gap_f32, gap_bf16)


def test_bad_rollout_dtype_names_the_key():
    from rlpt.models import init_model

    cfg = compose(TINY)
    model = init_model(cfg.model, 0)
    assert rollout_model(model, cfg.rl.rollout) is model
    cfg.rl.rollout.compute_dtype = "float8"
    with pytest.raises(ValueError, match="rl.rollout.compute_dtype"):
        rollout_model(model, cfg.rl.rollout)
