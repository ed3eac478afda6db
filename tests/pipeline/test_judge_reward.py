"""Has a pulse: `experiment=judge_reward_tiny`, a reward model trained in the stage shapes GRPO as a judge."""
import json

from rlpt.config import compose
from rlpt.pipeline.quickstart import run
from rlpt.rewards.judges import JUDGES

TINY = ["experiment=judge_reward_tiny", "rl.sft_steps=4", "rl.steps=2", "rl.eval_per_domain=8",
        "rl.rollout.prompts_per_step=4", "rl.rollout.group_size=4", "data.batch_size=8", "model.hidden_size=32",
        "model.intermediate_size=64", "train.ckpt_every=0", "train.progress=false", "pref.train_tasks=64",
        "pref.heldout_tasks=16", "pref.rm_steps=4", "pref.rm_batch_size=8", "observe.tensorboard=false"]


def test_judge_reward_pulse(tmp_path):
    summary = run(compose(TINY + [f"train.out_dir={tmp_path}"]))
    assert summary["reward"] == "judged"
    comps = summary["reward_components"]
    assert set(comps) == {"correctness", "judge_rm"} and 0 < comps["judge_rm"] < 1  # a sigmoid of RM logits
    assert "pairwise_accuracy" in summary["judge_rm"]
    assert "rm" not in JUDGES  # the stage's judge lives for its run only
    rows = [json.loads(line) for line in open(tmp_path / "rl" / "metrics.jsonl")]
    assert all("judge_disagreement/rm/arith/add" in r for r in rows)
