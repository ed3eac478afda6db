"""Has a pulse: experiment=vision_tiny (a VLM from scratch: SFT cold start on image tasks, then GRPO with the
images in every rollout and row) runs end to end on tiny settings, and its checkpoint evaluates with images."""
import pytest

import rlpt

TINY = ["experiment=vision_tiny", "rl.sft_steps=4", "rl.sft_check_every=2", "rl.sft_dev_per_domain=2",
        "rl.steps=2", "rl.eval_per_domain=4", "rl.rollout.prompts_per_step=2", "rl.rollout.group_size=4",
        "data.batch_size=4", "model.hidden_size=32", "model.intermediate_size=64", "model.vision.hidden_size=32",
        "model.vision.intermediate_size=48", "train.ckpt_every=2", "train.progress=false"]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["lora.rank=4"]])
def test_vision_tiny_pulse_and_checkpoint_eval(tmp_path, extra):
    result = rlpt.run(TINY + extra + [f"train.out_dir={tmp_path}"])
    assert {"sft_pass1", "rl_pass1", "wall_s"} <= set(result.summary) and result.summary["rl_steps"] == 2
    from rlpt.eval.checkpoint import load_policy
    from rlpt.eval.heldout import evaluate, heldout_tasks

    model, tok, source = load_policy(str(tmp_path))
    assert source.startswith("orbax:") and model.config.vision is not None
    tasks = heldout_tasks(["vision/bar_extreme"], {"vision/bar_extreme": [1]}, 4)
    assert evaluate(model, tok, tasks, max_new_tokens=4)["n"] == 4
