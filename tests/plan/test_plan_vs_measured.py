"""scripts/bench/plan_vs_measured.py: the planner's program run on this machine's devices (issue #29's device
check, here on cpu:2 with a tiny model): the measured step is the rehearsed program, its prediction is FLOPs /
peak."""
import importlib.util
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location("plan_vs_measured",
                                               os.path.join(ROOT, "scripts", "bench", "plan_vs_measured.py"))
pvm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pvm)


@pytest.mark.parametrize("stage", [
    ["stage=sft", "data.seq_len=64", "data.batch_size=4"],
    ["stage=rl", "rl.rollout.prompts_per_step=2", "rl.rollout.group_size=2", "rl.rollout.max_prompt_len=16",
     "rl.rollout.max_new_tokens=16", "rl.algo.kl_coef=0.1"],
], ids=["sft", "rl_with_reference"])
def test_the_rehearsed_step_runs_and_is_compared_with_its_prediction(stage):
    from rlpt.plan.chips import CPU_CHIP

    r = pvm.measure(["target=cpu:2", "model=tiny", "mesh=fsdp", *stage], steps=1)
    assert r["program"] == ("train_step" if stage[0] == "stage=sft" else "rl_update")
    assert r["peer"] > 0 and r["ours"] == pytest.approx(r["flops_per_device"] / CPU_CHIP.peak_flops)
    assert r["ratio"] == pytest.approx(r["ours"] / r["peer"])
    assert abs(r["flops_vs_analytic"] - 1) < 0.15  # the compiled program's FLOPs are the analytic 6·N·T
    assert r["fits"] and r["measured_peak_bytes"] is None  # XLA:CPU reports no device memory


def test_a_tpu_target_and_an_unknown_batch_key_are_named_errors():
    with pytest.raises(ValueError, match="target=tpu:v5e-4.*this machine's devices"):
        pvm.measure(["target=tpu:v5e-4", "model=tiny"], steps=1)
    import jax

    with pytest.raises(KeyError, match="'pixels'"):
        pvm.random_batch({"pixels": jax.ShapeDtypeStruct((1, 2, 3), "float32")}, 128, 0)
