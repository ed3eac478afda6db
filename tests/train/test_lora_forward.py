"""LoRA applied in the forward pass (`lora_params`, `LoraWeight`) computes what the merged weights compute, trains
only the adapters, and builds nothing of a target's size in the train step."""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlpt.config.schema import LoraConfig
from rlpt.models import ModelConfig, init_model
from rlpt.models.transformer import LoraWeight, forward, hidden_states, hidden_states_shared_prefix, merged_params
from rlpt.train.lora import init_lora, lora_params, merge_lora
from rlpt.train.state import create_state
from rlpt.train.step import build_train_step

TARGETS = ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"]
BASE = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
                   initializer_range=0.3)
VARIANTS = {
    "tied": {},
    "untied_unrolled": dict(tie_embeddings=False, scan_layers=False),
    "qwen2_qkv_bias": dict(qkv_bias=True),
    "all_biases": dict(qkv_bias=True, o_bias=True, mlp_bias=True),
    "qwen3_qk_norm": dict(family="qwen3", qk_norm=True, num_kv_heads=1, remat="full"),
}


def _setup(variant, targets=TARGETS, rank=3):
    model = init_model(dataclasses.replace(BASE, **VARIANTS[variant]), seed=1)
    lcfg = LoraConfig(rank=rank, alpha=6.0, targets=list(targets))
    adapters = init_lora(model.params, lcfg, jax.random.key(2))
    # b starts at zero; a non-zero b gives every adapter a gradient and the forward a change to check
    keys = iter(jax.random.split(jax.random.key(3), len(targets)))
    adapters = {"layers": {n: dict(ab, b=0.2 * jax.random.normal(next(keys), ab["b"].shape, ab["b"].dtype))
                           for n, ab in adapters["layers"].items()}}
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, BASE.vocab_size, (2, 9)), jnp.int32)
    return model.config, model.params, lcfg, adapters, tokens


def _nll(cfg, params, tokens):
    logits = forward(params, cfg, tokens[:, :-1]).astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1))


def _assert_close(got, want, rtol=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.max(np.abs(got - want)) <= rtol * np.max(np.abs(want)), (np.max(np.abs(got - want)), np.max(np.abs(want)))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_loss_and_adapter_gradients_equal_the_merged_weights(variant):
    cfg, base, lcfg, adapters, tokens = _setup(variant)

    def loss(adapters, wrap):
        return _nll(cfg, wrap(base, adapters, lcfg), tokens)

    lf, gf = jax.jit(jax.value_and_grad(lambda a: loss(a, lora_params)))(adapters)
    lm, gm = jax.jit(jax.value_and_grad(lambda a: loss(a, merge_lora)))(adapters)
    assert abs(float(lf) - float(lm)) <= 1e-5 * abs(float(lm))
    assert abs(float(lf) - float(_nll(cfg, base, tokens))) > 1e-3  # the adapters do change the model
    for name in TARGETS:
        for part in ("a", "b"):
            assert float(jnp.max(jnp.abs(gm["layers"][name][part]))) > 0
            _assert_close(gf["layers"][name][part], gm["layers"][name][part])


@pytest.mark.parametrize("target", TARGETS)
def test_each_target_alone(target):
    """wo has two input axes (H, Dh) and w_down's input is the MLP width: each target is wired on its own."""
    cfg, base, lcfg, adapters, tokens = _setup("all_biases", targets=[target], rank=2)
    lf, gf = jax.value_and_grad(lambda a: _nll(cfg, lora_params(base, a, lcfg), tokens))(adapters)
    lm, gm = jax.value_and_grad(lambda a: _nll(cfg, merge_lora(base, a, lcfg), tokens))(adapters)
    assert abs(float(lf) - float(lm)) <= 1e-5 * abs(float(lm))
    jax.tree.map(_assert_close, gf, gm)


def test_shared_prefix_and_cached_forward_apply_the_adapters():
    """The shared-prefix forward (rl.exec.share_prefix) and the cached forward (prefill/append) see the adapters."""
    cfg, base, lcfg, adapters, tokens = _setup("qwen3_qk_norm")
    wrapped, merged = lora_params(base, adapters, lcfg), merge_lora(base, adapters, lcfg)
    prefix = (tokens[:1, :4], jnp.arange(4)[None], jnp.ones((1, 4), jnp.int32))
    rows = (tokens[:, 4:], jnp.broadcast_to(4 + jnp.arange(5), (2, 5)), jnp.ones((2, 5), jnp.int32))
    got = hidden_states_shared_prefix(wrapped, cfg, prefix, rows, 2)
    want = hidden_states_shared_prefix(merged, cfg, prefix, rows, 2)
    _assert_close(got, want)
    from rlpt.models.transformer import init_cache

    got = hidden_states(wrapped, cfg, tokens, cache=init_cache(cfg, 2, 12))[0]
    want = hidden_states(merged, cfg, tokens, cache=init_cache(cfg, 2, 12))[0]
    _assert_close(got, want)


def test_gradients_reach_only_the_adapters():
    cfg, base, lcfg, adapters, tokens = _setup("tied")
    g_base = jax.grad(lambda b: _nll(cfg, lora_params(b, adapters, lcfg), tokens))(base)
    for name in TARGETS:
        assert not np.any(np.asarray(g_base["layers"][name])), name
    assert np.any(np.asarray(g_base["layers"]["attn_norm"]))  # the rest of the base is not cut off


def test_merged_weight_matches_the_adapter_product():
    cfg, base, lcfg, adapters, _ = _setup("tied")
    w = lora_params(base, adapters, lcfg)["layers"]["wo"]
    assert isinstance(w, LoraWeight) and w.a.shape == (2, 4, 8, 3) and w.b.shape == (2, 3, 32)
    ab = adapters["layers"]["wo"]
    want = base["layers"]["wo"] + 2.0 * jnp.einsum("lir,lro->lio", ab["a"], ab["b"]).reshape(2, 4, 8, 32)
    _assert_close(merged_params({"w": w})["w"], want)
    one = jax.tree.map(lambda a: a[1], w)  # a layer slice, as scan and layer_list take it
    _assert_close(one.merged(), want[1])


# A moderately sized model: each target's f32 weight is 0.25-0.75 MiB per layer; 3 x 64 tokens per step (no
# activation has a weight's shape).
MID = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=768, num_layers=4, num_heads=8, num_kv_heads=4,
                  remat="none")


def _compiled_step(wrap):
    cfg, lcfg = MID, LoraConfig(rank=8, alpha=16.0, targets=TARGETS)
    base = jax.eval_shape(lambda: init_model(cfg, 0).params)
    adapters = jax.eval_shape(lambda p: init_lora(p, lcfg, jax.random.key(0)), base)

    def loss_fn(params, frozen, batch, rng):
        nll = _nll(cfg, params, batch["tokens"]) * batch["tokens"].shape[0]
        return nll, jnp.float32(batch["tokens"].shape[0]), {}

    step = build_train_step(loss_fn, optax.adam(1e-3), params_fn=lambda a, fr: wrap(fr["base"], a, lcfg))
    state = jax.eval_shape(lambda a, b: create_state(a, optax.adam(1e-3), 0, {"base": b}), adapters, base)
    batch = {"tokens": jax.ShapeDtypeStruct((1, 3, 65), jnp.int32)}
    compiled = step.lower(state, batch).compile()
    shapes = {tuple(base["layers"][n].shape) for n in TARGETS} | {tuple(base["layers"][n].shape[1:]) for n in TARGETS}
    return compiled, shapes, sum(base["layers"][n].size * 4 for n in TARGETS)


# Ops that only move or view a weight: XLA:CPU lays the frozen q and o weights out transposed for the input
# gradient (full fine-tuning does the same); they are in the weight's own dtype and build nothing new.
_LAYOUT_OPS = {"bitcast", "copy", "transpose", "get-tuple-element", "parameter", "tuple"}


def _weight_sized_f32(hlo: str, shapes) -> list[str]:
    """Instructions of the optimised HLO that compute (not view or move) an f32 array of a target's stacked or
    per-layer shape: a merged weight, its delta or its gradient."""
    found = []
    for line in hlo.splitlines():
        m = re.search(r"%([\w.-]+)\s*=\s*f32\[([\d,]+)\]\{[\d,]*\}\s+([\w-]+)\(", line)
        if not m or tuple(int(d) for d in m.group(2).split(",")) not in shapes:
            continue
        op = m.group(3)
        if op == "fusion" and re.fullmatch(r"(transpose|copy)_(transpose_|copy_)*fusion(\.\d+)?", m.group(1)):
            op = "transpose"  # a fused layout copy (XLA names a fusion after its ops)
        if op not in _LAYOUT_OPS:
            found.append(line.strip()[:160])
    return found


def test_train_step_builds_no_weight_sized_f32_temporary():
    forward_step, shapes, target_bytes = _compiled_step(lora_params)
    merge_step, _, _ = _compiled_step(merge_lora)
    temp_forward = forward_step.memory_analysis().temp_size_in_bytes
    temp_merge = merge_step.memory_analysis().temp_size_in_bytes
    print(f"train-step temp bytes: LoRA forward {temp_forward}, merge {temp_merge}; f32 targets {target_bytes}")
    assert _weight_sized_f32(merge_step.as_text(), shapes)  # the check sees the merge's copies
    assert _weight_sized_f32(forward_step.as_text(), shapes) == []
    # the merge holds the merged weights (and their full-size gradients); the forward-applied adapters do not
    assert temp_forward + target_bytes <= temp_merge


def test_a_wrapped_model_samples_and_exports_as_merged(tmp_path):
    """A Model holding LoraWeights samples (CPU layout and the other backends' cached forward) and exports what the
    merged weights give."""
    from rlpt.models import Model, load_pretrained
    from rlpt.models.ops import compiling_for
    from rlpt.sampling import generate

    cfg, base, lcfg, adapters, tokens = _setup("qwen2_qkv_bias")
    wrapped, merged = Model(cfg, lora_params(base, adapters, lcfg)), Model(cfg, merge_lora(base, adapters, lcfg))
    prompts = np.asarray(tokens).tolist()
    want = generate(merged, prompts, 6, temperature=0.0)
    np.testing.assert_array_equal(generate(wrapped, prompts, 6, temperature=0.0).tokens, want.tokens)
    with compiling_for("gpu"):
        np.testing.assert_array_equal(generate(wrapped, prompts, 6, temperature=0.0).tokens, want.tokens)
    wrapped.save_pretrained(str(tmp_path))
    loaded = load_pretrained(str(tmp_path))
    jax.tree.map(lambda got, w: np.testing.assert_array_equal(np.asarray(got), np.asarray(w)), loaded.params,
                 merged.params)


def test_trainer_shards_the_adapters_and_merges_once_for_the_policy():
    """make_trainer on an fsdp x tensor mesh: A shards like its weight's input axis (fsdp), B like its output axis
    (tensor); a step trains them through the forward; `Trainer.model()` is the merged policy."""
    from rlpt.config import compose
    from rlpt.train.loop import make_trainer
    from rlpt.train.losses import sft_loss

    cfg = compose(["mesh=fsdp_tp", "model.hidden_size=32", "model.intermediate_size=64", "train.ckpt_every=0",
                   "lora.rank=4", f"lora.targets=[{','.join(TARGETS)}]", "optim.lr=1e-2"])
    trainer = make_trainer(cfg, sft_loss)
    assert dict(trainer.mesh.shape)["fsdp"] == 2 and dict(trainer.mesh.shape)["tensor"] == 4
    ad = trainer.state.params["layers"]
    assert ad["wq"]["a"].sharding.spec[1] == "fsdp" and ad["wq"]["b"].sharding.spec[2] == "tensor"
    assert ad["w_down"]["a"].sharding.spec[1] == "tensor" and ad["w_down"]["b"].sharding.spec[2] == "fsdp"
    B, T = 4, 16
    toks = np.random.default_rng(0).integers(0, trainer.model_cfg.vocab_size, (B, T + 1)).astype(np.int32)
    batch = {"inputs": toks[:, :-1], "targets": toks[:, 1:], "positions": np.tile(np.arange(T, dtype=np.int32), (B, 1)),
             "segment_ids": np.ones((B, T), np.int32), "loss_mask": np.ones((B, T), np.float32)}
    assert float(jnp.max(jnp.abs(ad["wq"]["b"]))) == 0.0
    for _ in range(2):
        metrics = trainer.step(batch)  # donates the state
    assert np.isfinite(float(metrics["loss"]))
    trained = trainer.state.params
    assert float(jnp.max(jnp.abs(trained["layers"]["wq"]["b"]))) > 0  # B moved off zero: gradients reached it
    policy = trainer.model().params
    want = merge_lora(trainer.state.frozen["base"], trained, cfg.lora)
    jax.tree.map(lambda got, w: np.testing.assert_array_equal(np.asarray(got), np.asarray(w)), policy, want)
