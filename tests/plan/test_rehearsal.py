"""The compile-only rehearsal (rlpt.plan, issue #29): a Qwen2.5-0.5B-shaped model (real widths, vocab and heads;
2 of its 24 layers, to keep the default run short) AOT-compiled for a TPU v5e 2x2 slice with fsdp=4. The SFT step,
the GRPO update and the sampler's decode step must fit, and their compiled FLOPs (every loop trip counted) must
agree with 6·N·T (train) and 2·N·T (decode) within 15%. Skipped where the libtpu wheel is not installed."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from rlpt.config.plan_schema import compose_plan
from rlpt.plan import parse_target, rehearse
from rlpt.plan.chips import TargetError
from rlpt.plan.programs import body_params

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="AOT for TPU needs the libtpu wheel (pip install 'rlpt[plan]')")
QWEN = ["model=qwen2_5_0_5b", "model.num_layers=2", "target=tpu:v5e-4", "mesh=fsdp", "plan.write=false"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _program(summary, name):
    return next(p for p in summary["programs"] if p["program"] == name)


@pytest.fixture(scope="module")
def sft():
    return rehearse(compose_plan(QWEN + ["stage=sft", "data.seq_len=256", "data.batch_size=8", "plan.sampler=false"]))


@pytest.fixture(scope="module")
def grpo():
    return rehearse(compose_plan(QWEN + ["stage=rl", "rl.rollout.prompts_per_step=4", "rl.rollout.group_size=4",
                                         "rl.rollout.max_prompt_len=128", "rl.rollout.max_new_tokens=128",
                                         "plan.prefill=false"]))


@needs_libtpu
def test_sft_step_fits_and_matches_6nt(sft):
    cfg = compose_plan(QWEN)
    m = cfg.model
    assert (m.vocab_size, m.hidden_size, m.intermediate_size, m.num_heads, m.num_kv_heads) == (151936, 896, 4864, 14, 2)
    assert sft["fits"] and sft["sharding_ok"] and sft["mesh"]["fsdp"] == 4 and sft["devices"] == 4
    step = _program(sft, "train_step")
    assert step["unsplit"] == [] and step["replicated"] == []  # 8 rows, vocab and widths all divide over fsdp 4
    mem = step["memory"]
    assert 0 < mem["total"] <= step["hbm_per_device_bytes"] < sft["hbm_capacity_bytes"] == 16 * 2**30
    assert mem["aliased"] > 0  # the state is donated
    n = m.num_params()  # tied embeddings: the table is also the LM head, so every parameter is a matmul weight
    six_nt = 6 * n * 8 * 256
    assert abs(step["flops"] / six_nt - 1) < 0.15, (step["flops"], six_nt)
    assert sft["flops_per_step"] == step["flops"] and sft["step_s_at_peak"] == pytest.approx(
        step["flops"] / 4 / 197e12)
    # FSDP: parameters are gathered and gradients reduced; the biggest parameter is split over fsdp
    kinds = {c["kind"] for c in step["collectives"]}
    assert kinds & {"all-gather", "reduce-scatter", "all-reduce"} and all(c["bytes"] > 0 for c in step["collectives"])
    assert "fsdp" in step["largest_inputs"][0]["spec"]


@needs_libtpu
def test_grpo_update_and_decode_fit_and_match_6nt_2nt(grpo):
    m = compose_plan(QWEN).model
    assert grpo["fits"] and grpo["sharding_ok"]
    update = _program(grpo, "rl_update")
    B, T, K, P = 16, 256, 128, 4  # rows, row width, response window, prompts (each group's prompt runs once)
    head = m.vocab_size * m.hidden_size
    six_nt = 6 * body_params(m) * (P * (T - K) + B * K) + 6 * head * B * K
    assert abs(update["flops"] / six_nt - 1) < 0.15, (update["flops"], six_nt)
    decode = _program(grpo, "sampler_decode")
    two_nt = 2 * (body_params(m) + head) * B  # one decode step of the 16 rows
    assert abs(decode["flops"] / two_nt - 1) < 0.15, (decode["flops"], two_nt)
    # the sampler's total counts the optimizer state that stays resident while it runs
    assert decode["memory"]["resident"] > 0 and decode["hbm_per_device_bytes"] < grpo["hbm_capacity_bytes"]
    # the decode loop updates its donated cache where it lies: no input is copied at its entry but the small
    # per-call relayouts of the attention weights
    assert all(not c["input"].startswith("state.cache") for c in decode["input_copies"])


@needs_libtpu
def test_rows_that_do_not_divide_over_fsdp_fail_the_sharding_check_with_a_fix():
    """6 rows on fsdp 4: `logical_spec` leaves every activation whole on fsdp (each chip runs all 6 rows). No
    input is large, so only the unsplit check (`rlpt.parallel.rules.recording_unsplit`) sees it, in the values the
    step constrains: the logits of `logits_from_hidden` among them."""
    from rlpt.plan.report import advice, failures, markdown

    summary = rehearse(compose_plan(["model=tiny", "target=tpu:v5e-4", "mesh=fsdp", "stage=sft", "plan.sampler=false",
                                     "plan.write=false", "data.batch_size=6", "data.seq_len=16",
                                     "plan.replication_mb=0.04"]))
    assert summary["fits"] and not summary["sharding_ok"]
    step = _program(summary, "train_step")
    assert step["replicated"] == []
    logits = next(u for u in step["unsplit"] if u["name"].startswith("rlpt.models.transformer.logits_from_hidden"))
    assert (logits["shape"], logits["logical"], logits["axis"], logits["dim_size"], logits["split"]) == (
        [6, 16, 128], "batch", "fsdp", 6, 4)
    assert logits["bytes"] == 6 * 16 * 128 * 4  # f32, whole
    assert logits["fix"].startswith("rows per micro-batch a multiple of 4") and "mesh.fsdp=2" in logits["fix"]
    assert any(line.startswith("UNSPLIT: train_step: rlpt.models.transformer.logits_from_hidden") and
               "dim 0 (batch=6) does not divide by 4" in line for line in failures(summary))
    assert "Unsplit dimensions" in markdown(summary) and any("rows per micro-batch" in a for a in advice(
        compose_plan(["model=tiny"]), summary))


def test_target_names():
    t = parse_target("tpu:v5p-64")
    assert (t.chips, t.topology, t.chip.hbm_bytes) == (32, "v5p:2x4x4", 95 * 2**30)
    assert parse_target("tpu:v5e-4").topology == "v5e:2x2" and parse_target("tpu:v6e-8").topology == "v6e:2x4"
    # Cloud's names: v5p-8 is one host of 2x2x1 chips (1x2x2, two hosts, crashed libtpu's compiler on 8B models)
    assert [parse_target(f"tpu:v5p-{n}").topology for n in (8, 16, 32, 64, 128)] == [
        "v5p:2x2x1", "v5p:2x2x2", "v5p:2x2x4", "v5p:2x4x4", "v5p:4x4x4"]
    assert parse_target("tpu:v5e:2x4").chips == 8 and parse_target("cpu:8").chips == 8
    for bad in ("tpu:v5e-3", "tpu:v9-8", "tpu:v5e:2x2x2", "gpu:a100-8", "v5e-4"):
        with pytest.raises(TargetError, match="valid: tpu:v4-"):
            parse_target(bad)


def _plan(*args, timeout=600):
    env = dict(os.environ, XLA_FLAGS="", RLPT_MALLOC_TUNING="0")
    return subprocess.run([sys.executable, "-m", "rlpt.plan", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_bad_target_is_a_one_line_error(tmp_path):
    proc = _plan("target=tpu:v5z-4", f"plan.out_dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "target='tpu:v5z-4'" in err[0] and "tpu:v5p-{8," in err[0] and "cpu:<devices>" in err[0]


@needs_libtpu
def test_a_model_that_does_not_fit_exits_nonzero_naming_its_buffers(tmp_path):
    # one 1.6B-parameter layer: f32 weights + Adam moments (~25 GB) on one 16 GiB v5e chip
    proc = _plan("target=tpu:v5e-1", "model=qwen2_5_0_5b", "model.num_layers=1", "model.hidden_size=8192",
                 "model.intermediate_size=65536", "model.num_heads=64", "model.num_kv_heads=8", "model.head_dim=128",
                 "model.vocab_size=1024", "data.seq_len=16", "data.batch_size=1", "plan.sampler=false",
                 f"plan.out_dir={tmp_path}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["fits"] is False and last["hbm_per_device_bytes"] > last["hbm_capacity_bytes"] == 16 * 2**30
    assert "flops_per_step" in last and "step_s_at_peak" in last
    assert "DOES NOT FIT: train_step" in proc.stderr and "['w_down'] 2.00 GiB" in proc.stderr  # names its buffers
    (md,) = tmp_path.glob("qwen2_5_0_5b_sft_tpu-v5e-1_*.md")  # other overrides: a file of their own
    report = md.read_text()
    assert "opt_state" in report and "What to change" in report and "lora.rank" in report


@needs_libtpu
def test_matmul_flops_count_every_trip_of_a_layer_scan():
    """XLA's cost analysis counts a while body once; the HLO count multiplies by the scan's trip count."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from rlpt.plan.analyze import cost, matmul_flops
    from rlpt.plan.chips import target_devices

    mesh = jax.make_mesh((4,), ("x",), devices=target_devices(parse_target("tpu:v5e-4")))

    def f(x, ws):
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0].sum()

    x = jax.ShapeDtypeStruct((1024, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("x")))
    ws = jax.ShapeDtypeStruct((3, 256, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    compiled = jax.jit(jax.grad(f, argnums=1)).lower(x, ws).compile()
    expected = 3 * 3 * 2 * 1024 * 256 * 256 / 4  # layers x (forward, two backward matmuls) x 2MNK, per device
    looped, once = matmul_flops(compiled.as_text())
    assert looped == expected and once == expected / 3
    assert cost(compiled)["flops"] < 0.5 * expected  # what the cost analysis alone would report


def test_compiling_for_a_tpu_drops_the_cpu_rewrites():
    """A rehearsal traces on a CPU host for a TPU: the model's XLA:CPU-only forms must be off inside it."""
    from rlpt.models.ops import compiling_for, on_cpu

    assert on_cpu()  # the test process runs on CPU
    with compiling_for("tpu"):
        assert not on_cpu()
        with compiling_for("cpu"):
            assert on_cpu()
        assert not on_cpu()
    assert on_cpu()
