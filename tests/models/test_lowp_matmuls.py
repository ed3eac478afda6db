"""16-bit compute: the projections' custom VJP and the attention backward's key-side contraction.

`dense` differentiates through `_dense_vjp`; at bf16 the incoming cotangent is rounded to bf16 once and both
gradient matmuls take bf16 operands with f32 accumulation (autodiff would pair the f32 cotangent with bf16
weights, which XLA:CPU runs as f32 matmuls). The weight gradient comes back in the weight's dtype unrounded.
"""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.config import OptimConfig
from rlpt.models import ModelConfig, init_model
from rlpt.models.ops.xla_cpu import _contract_queries, add_bias, dense
from rlpt.models.ops.xla_cpu import norm_scale as _scale
from rlpt.train.losses import sft_loss
from rlpt.train.optim import make_optimizer
from rlpt.train.state import create_state
from rlpt.train.step import build_train_step

BF16 = jnp.bfloat16
CASES = [  # (equation, x shape, w shape): every projection of the model, and the tied head (V, D)
    ("btd,dhk->bthk", (2, 5, 16), (16, 4, 8)),
    ("bthk,hkd->btd", (2, 5, 4, 8), (4, 8, 16)),
    ("btd,df->btf", (2, 5, 16), (16, 24)),
    ("btd,vd->btv", (2, 5, 16), (40, 16)),
]


def _f32(a):
    return np.asarray(jnp.asarray(a, jnp.float32), np.float64)


@pytest.mark.parametrize("eq,xs,ws", CASES)
@pytest.mark.parametrize("out_dtype", [None, jnp.float32])
def test_dense_bf16_gradients_are_bf16_matmuls_of_the_rounded_cotangent(eq, xs, ws, out_dtype):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=xs), BF16)  # activations arrive in the compute dtype
    w = jnp.asarray(rng.normal(size=ws) * 0.3, jnp.float32)  # f32 master weights
    out, vjp = jax.vjp(lambda x, w: dense(eq, x, w, BF16, out_dtype), x, w)
    assert out.dtype == (BF16 if out_dtype is None else jnp.float32)
    g = jnp.asarray(rng.normal(size=out.shape), out.dtype)
    dx, dw = vjp(g)
    assert dx.dtype == BF16 and dw.dtype == jnp.float32 and dw.shape == w.shape

    (xl, wl), ol = eq.split("->")[0].split(","), eq.split("->")[1]
    g16, x16, w16 = _f32(g.astype(BF16)), _f32(x), _f32(w.astype(BF16))
    want_out = _f32(jnp.asarray(np.einsum(eq, x16, w16), out.dtype))
    # atol on the output's scale, as for dw below: with AMX (bf16 products, f32 sums in another order) an output
    # near 0 after cancellation differs from the f64 sum by an f32 ulp of the terms, not of the result
    np.testing.assert_allclose(_f32(out), want_out, rtol=1e-6, atol=1e-6 * np.abs(want_out).max())
    want_dw = np.einsum(f"{xl},{ol}->{wl}", x16, g16)
    np.testing.assert_allclose(_f32(dw), want_dw, rtol=1e-5, atol=1e-5 * np.abs(want_dw).max())
    want_dx = _f32(jnp.asarray(np.einsum(f"{ol},{wl}->{xl}", g16, w16), BF16))  # one bf16 rounding
    np.testing.assert_allclose(_f32(dx), want_dx, rtol=1e-2, atol=1e-2 * np.abs(want_dx).max())

    # and the same gradients as f32 autodiff, up to bf16 rounding
    ref = jax.vjp(lambda x, w: jnp.einsum(eq, x, w), _f32(x).astype(np.float32), np.asarray(w))[1](
        np.asarray(_f32(g), np.float32))
    for mine, theirs in zip((dx, dw), ref, strict=True):
        err = np.abs(_f32(mine) - np.asarray(theirs)).max() / np.abs(np.asarray(theirs)).max()
        assert err < 2e-2, err


def test_dense_f32_gradients_equal_plain_autodiff():
    rng = np.random.default_rng(1)
    x, w = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((2, 3, 8), (8, 6)))
    g = jnp.asarray(rng.normal(size=(2, 3, 6)), jnp.float32)
    got = jax.vjp(lambda x, w: dense("btd,df->btf", x, w, jnp.float32), x, w)[1](g)
    want = jax.vjp(lambda x, w: jnp.einsum("btd,df->btf", x, w), x, w)[1](g)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("Q", [12, 7])  # even: split in two; odd: the plain einsum
@pytest.mark.parametrize("dtype", [BF16, jnp.float32])
def test_contract_queries_is_the_key_side_contraction(Q, dtype):
    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.normal(size=(3, Q, 10)), dtype)
    b = jnp.asarray(rng.normal(size=(3, Q, 4)), dtype)
    got = jax.jit(_contract_queries)(a, b)
    assert got.dtype == jnp.float32 and got.shape == (3, 10, 4)
    np.testing.assert_allclose(_f32(got), np.einsum("nqs,nqd->nsd", _f32(a), _f32(b)), rtol=1e-5, atol=1e-5)


def _dot_operand_types(hlo: str) -> list[tuple[str, str]]:
    """(lhs, rhs) element types of every dot, except the f32 token sums of norm-scale gradients (a ones
    vector times f32 products, `_sum_rows`), which are f32 by design."""
    shapes = dict(re.findall(r"%([\w.-]+) = (\w+\[[\d,]*\])", hlo))
    out = []
    for a, b in re.findall(r" dot\(%([\w.-]+), %([\w.-]+)\)", hlo):
        dims = shapes.get(a, "?[]").split("[")[1].rstrip("]").split(",")
        if shapes.get(a, "").startswith("f32[") and (len(dims) == 1 or "1" in dims):
            continue  # the ones vector (M,) or (M, 1)
        out.append((shapes.get(a, "?").split("[")[0], shapes.get(b, "?").split("[")[0]))
    return out


@pytest.mark.parametrize("tie", [True, False])
def test_bf16_train_step_runs_every_matmul_in_bf16(tie):
    """The compiled bf16 SFT step (forward, attention backward, projections' and head's gradients) has no
    matmul with f32 operands, and it runs (XLA:CPU rejects some bf16 dot forms at run time: a transposed
    tied head did), with a finite loss close to the f32 step's."""
    cfg = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, tie_embeddings=tie, compute_dtype="bfloat16", param_dtype="float32")
    params = init_model(cfg, seed=0).params
    opt = make_optimizer(OptimConfig(name="adamw", lr=1e-3, schedule="constant"), 10)
    B, T = 4, 16
    toks = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, B, T + 1)).astype(np.int32)
    batch = {"inputs": toks[..., :-1], "targets": toks[..., 1:],
             "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (1, B, T)),
             "segment_ids": np.ones((1, B, T), np.int32), "loss_mask": np.ones((1, B, T), np.float32)}
    losses = {}
    for dt in ("bfloat16", "float32"):
        c = dataclasses.replace(cfg, compute_dtype=dt)
        step = build_train_step(sft_loss(c), opt, donate=False, compute_dtype=dt)
        state = create_state(params, opt, seed=0)
        if dt == "bfloat16":
            types = _dot_operand_types(step.lower(state, batch).compile().as_text())
            assert types and all(t == ("bf16", "bf16") for t in types), types
        _, metrics = step(state, batch)
        losses[dt] = float(metrics["loss"])
    assert np.isfinite(losses["bfloat16"]) and abs(losses["bfloat16"] - losses["float32"]) < 0.05, losses


@pytest.mark.parametrize("dtype", [BF16, jnp.float32])
def test_bias_and_norm_scale_gradients_equal_autodiff(dtype):
    """add_bias and the RMSNorm scale have their own VJPs (the token sums of their weight gradients run as a
    ones-vector matmul at 16 bits); the gradients equal autodiff of the plain formulas."""
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(3, 5, 4, 8)), dtype)
    b = jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)
    g = jnp.asarray(rng.normal(size=x.shape), dtype)
    for mine, plain in ((add_bias, lambda x, b: x + b.astype(x.dtype)),
                        (_scale, lambda x, w: w.astype(x.dtype) * x)):
        out, vjp = jax.vjp(mine, x, b)
        want_out, want_vjp = jax.vjp(lambda x, b, plain=plain: plain(x.astype(jnp.float32), b), x, b)
        tol = 1e-2 * float(jnp.abs(want_out).max()) if dtype == BF16 else 1e-6
        np.testing.assert_allclose(_f32(out), _f32(want_out), rtol=0, atol=tol)
        (dx, db), (wx, wb) = jax.jit(vjp)(g), want_vjp(g.astype(jnp.float32))
        assert dx.dtype == dtype and db.dtype == jnp.float32
        np.testing.assert_allclose(_f32(db), _f32(wb), rtol=1e-5, atol=1e-5)
        tol = 1e-2 * float(jnp.abs(wx).max()) if dtype == BF16 else 1e-6
        np.testing.assert_allclose(_f32(dx), _f32(wx), rtol=0, atol=tol)


def _tied_step_hlo(monkeypatch, transposed: bool, dtype: str) -> str:
    import rlpt.models.ops.xla_cpu as tr
    monkeypatch.setattr(tr, "_SMALL_OPERAND_COPIED", transposed)
    cfg = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_layers=1, num_heads=4,
                      num_kv_heads=2, tie_embeddings=True, compute_dtype=dtype, param_dtype="float32")
    opt = make_optimizer(OptimConfig(name="adamw", lr=1e-3, schedule="constant"), 10)
    B, T = 4, 16
    batch = {k: np.ones((1, B, T), np.int32) for k in ("inputs", "targets", "positions", "segment_ids")}
    batch["loss_mask"] = np.ones((1, B, T), np.float32)
    step = build_train_step(sft_loss(cfg), opt, donate=False, compute_dtype=dtype)
    return step.lower(create_state(init_model(cfg, seed=0).params, opt, seed=0), batch).compile().as_text()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_weight_gradients_do_not_transpose_the_large_operand(monkeypatch, dtype):
    """Weight gradients are computed with the smaller operand's free axes first and transposed after
    (`_weight_grad`): neither the tied head's (tokens, vocab) cotangent nor the down projection's (tokens, mlp)
    activations are copied into a (vocab | mlp, tokens) layout, as the plain forms are (128 MB and 4 x 11.5 MB
    per layer in the f32 train-step benchmark); the gradients equal the plain forms' (tests above)."""
    t = {"bfloat16": "bf16", "float32": "f32"}[dtype]
    feature_major = re.compile(rf"= {t}\[(128|48),(64|4,16)\]")  # vocab 128 / mlp 48 ahead of the 4 x 16 tokens
    assert feature_major.search(_tied_step_hlo(monkeypatch, False, dtype))  # the layouts XLA picks by itself
    assert not feature_major.search(_tied_step_hlo(monkeypatch, True, dtype))


@pytest.mark.parametrize("dtype", [BF16, jnp.float32])
def test_swiglu_equals_autodiff_of_the_plain_formula(dtype):
    """_swiglu (16-bit compute's SwiGLU on the projections' f32 accumulators) has the values and gradients of
    silu(gate) * up in f32, its output rounded once to the compute dtype."""
    from rlpt.models.ops.xla_cpu import _swiglu
    rng = np.random.default_rng(4)
    gate, up = (jnp.asarray(rng.normal(size=(2, 5, 24)) * 3, jnp.float32) for _ in range(2))
    out, vjp = jax.vjp(lambda g, u: _swiglu(g, u, jnp.dtype(dtype)), gate, up)
    want, want_vjp = jax.vjp(lambda g, u: jax.nn.silu(g) * u, gate, up)
    assert out.dtype == dtype
    np.testing.assert_array_equal(_f32(out), _f32(want.astype(dtype)))
    dh = jnp.asarray(rng.normal(size=out.shape), dtype)
    for mine, theirs in zip(jax.jit(vjp)(dh), want_vjp(dh.astype(jnp.float32)), strict=True):
        assert mine.dtype == jnp.float32
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_own_buffer_is_the_identity_in_values_and_gradients():
    """_own_buffer (q and k written out before attention's layout copy, and their gradients likewise) changes
    no value: forward and backward are the identity, under jit and in the compiled step's loss."""
    from rlpt.models.ops.xla_cpu import _own_buffer
    x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 3, 4, 8)), BF16)
    out, vjp = jax.vjp(jax.jit(_own_buffer), x)
    np.testing.assert_array_equal(_f32(out), _f32(x))
    g = x[::-1] * 2
    np.testing.assert_array_equal(_f32(jax.jit(vjp)(g)[0]), _f32(g))


def test_the_cpu_layout_workarounds_leave_the_bf16_step_unchanged(monkeypatch):
    """The step's loss and gradient norm with `_own_buffer` and the transposed head gradient on equal them off
    (bf16 rounding of q/k at the buffer may move the last bits only)."""
    import rlpt.models.ops.xla_cpu as tr
    cfg = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, tie_embeddings=True, compute_dtype="bfloat16", param_dtype="float32")
    params = init_model(cfg, seed=0).params
    opt = make_optimizer(OptimConfig(name="adamw", lr=1e-3, schedule="constant"), 10)
    toks = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, 4, 17)).astype(np.int32)
    batch = {"inputs": toks[..., :-1], "targets": toks[..., 1:],
             "positions": np.broadcast_to(np.arange(16, dtype=np.int32), (1, 4, 16)),
             "segment_ids": np.ones((1, 4, 16), np.int32), "loss_mask": np.ones((1, 4, 16), np.float32)}
    got = {}
    for on in (False, True):
        monkeypatch.setattr(tr, "_OWN_BUFFERS", on)
        monkeypatch.setattr(tr, "_SMALL_OPERAND_COPIED", on)
        step = build_train_step(sft_loss(cfg), opt, donate=False, compute_dtype="bfloat16")
        _, m = step(create_state(params, opt, seed=0), batch)
        got[on] = (float(m["loss"]), float(m["grad_norm"]))
    np.testing.assert_allclose(got[True], got[False], rtol=2e-3)


def test_contract_queries_copies_the_small_operand(monkeypatch):
    """At 16 bits the key-side contraction is computed as (N, Dh, S) and transposed after: XLA:CPU then copies
    the (N, Q, Dh) operand into a transposed layout, not the (N, Q, S) probabilities (the plain output order
    copies those: 64 such blocks per train step of the benchmark)."""
    import rlpt.models.ops.xla_cpu as tr
    a = jnp.zeros((3, 12, 40), BF16)
    b = jnp.zeros((3, 12, 4), BF16)

    def big_copies(key_major_last):
        monkeypatch.setattr(tr, "_SMALL_OPERAND_COPIED", key_major_last)
        hlo = jax.jit(lambda a, b: tr._contract_queries(a, b)).lower(a, b).compile().as_text()
        shapes = re.findall(r"= bf16\[([\d,]+)\]\{[\d,]+\} (?:copy|fusion)\(", hlo)
        return [s for s in shapes if np.prod([int(d) for d in s.split(",")]) == a.size]

    assert big_copies(False)  # the (N, S, Q)-ordered copy of the probabilities
    assert not big_copies(True)
