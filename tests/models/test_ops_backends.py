"""The two ops backends (`rlpt.models.ops`): `xla_cpu` computes what `reference` computes, op by op and for the
whole model, values and gradients, in f32 and bf16; `model.ops=auto` picks `reference` for every backend but CPU."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models import ModelConfig, init_model
from rlpt.models.ops import compiling_for, ops_for, reference, resolved_ops, xla_cpu
from rlpt.models.transformer import forward, hidden_states, init_cache

BF16 = jnp.bfloat16
# every architecture flag appears in at least one config; GQA, MQA and MHA head layouts
ARCHS = {
    "qwen2": dict(qkv_bias=True, tie_embeddings=True),
    "qwen3_mqa": dict(qk_norm=True, num_kv_heads=1, sliding_window=5),
    "biases_mha": dict(o_bias=True, mlp_bias=True, num_kv_heads=4),
}
# bf16 compute: the backends round at different places (xla_cpu keeps f32 gate/up accumulators and rounds the
# backward's cotangents once, as torch autocast does); the differences are bf16 roundings of the values compared
TOL = {"float32": 2e-5, "bfloat16": 3e-2}


def _f64(a):
    return np.asarray(jnp.asarray(a, jnp.float32), np.float64)


def _close(got, want, dtype, what):
    got, want = _f64(got), _f64(want)
    scale = max(np.abs(want).max(), 1e-6)
    err = np.abs(got - want).max() / scale
    assert err <= TOL[dtype], f"{what}: max |xla_cpu - reference| / max |reference| = {err:.3g} ({dtype})"


def _cfg(arch, dtype, ops):
    shape = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2)
    return ModelConfig(compute_dtype=dtype, ops=ops, **{**shape, **ARCHS[arch]})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_model_and_its_gradients_equal_across_backends(arch, dtype):
    """Logits and the gradient of a loss with respect to every parameter, for 2 x 8 packed rows of two
    segments (and padding), under model.ops=xla_cpu and model.ops=reference."""
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, 64, (2, 8)), jnp.int32)
    segments = jnp.asarray([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 0, 0]], jnp.int32)
    positions = jnp.asarray([[0, 1, 2, 0, 1, 2, 3, 0], list(range(8))], jnp.int32)
    weights = jnp.asarray(rng.normal(size=(2, 8, 64)), jnp.float32)
    params = init_model(_cfg(arch, dtype, "reference"), seed=1).params

    def run(ops):
        cfg = _cfg(arch, dtype, ops)

        def loss(p):
            logits = forward(p, cfg, tokens, positions, segments)
            return jnp.sum(logits.astype(jnp.float32) * weights), logits

        return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

    (loss_c, logits_c), grads_c = run("xla_cpu")
    (loss_r, logits_r), grads_r = run("reference")
    _close(logits_c, logits_r, dtype, "logits")
    flat_c, flat_r = jax.tree_util.tree_flatten_with_path(grads_c)[0], jax.tree.leaves(grads_r)
    for (path, g_c), g_r in zip(flat_c, flat_r, strict=True):
        assert g_c.dtype == g_r.dtype == jnp.float32
        _close(g_c, g_r, dtype, f"d loss / d {jax.tree_util.keystr(path)}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_op_equals_its_reference(dtype):
    """dense (every projection's equation, and a 4-way causal-chunked attention of 128 columns), rms_norm,
    add_bias, swiglu and attention: values and gradients of xla_cpu's forms against reference's."""
    dt = jnp.dtype(dtype)
    rng = np.random.default_rng(3)
    arr = lambda *shape, s=1.0, d=dt: jnp.asarray(rng.normal(size=shape) * s, d)  # noqa: E731

    def check(name, fn_c, fn_r, *args):
        g = jnp.asarray(rng.normal(size=jax.eval_shape(fn_r, *args).shape), jax.eval_shape(fn_r, *args).dtype)

        def out_and_grads(fn, args):
            out, vjp = jax.vjp(fn, *args)
            return out, vjp(g)

        (out_c, grads_c), (out_r, grads_r) = (jax.jit(out_and_grads, static_argnums=0)(fn, args)
                                              for fn in (fn_c, fn_r))
        _close(out_c, out_r, dtype, name)
        for i, (a, b) in enumerate(zip(grads_c, grads_r, strict=True)):
            assert a.dtype == b.dtype, f"{name}: gradient {i} dtype {a.dtype} vs {b.dtype}"
            _close(a, b, dtype, f"{name}: gradient {i}")

    for eq, xs, ws in [("btd,dhk->bthk", (2, 5, 16), (16, 4, 8)), ("bthk,hkd->btd", (2, 5, 4, 8), (4, 8, 16)),
                       ("btd,vd->btv", (2, 5, 16), (40, 16))]:
        w = arr(*ws, s=0.3, d=jnp.float32)
        for out_dtype in (None, jnp.float32):
            check(f"dense {eq} -> {out_dtype}", lambda x, w, eq=eq, o=out_dtype: xla_cpu.dense(eq, x, w, dt, o),
                  lambda x, w, eq=eq, o=out_dtype: reference.dense(eq, x, w, dt, o), arr(*xs), w)
    x, scale_w, bias = arr(2, 5, 16), arr(16, d=jnp.float32), arr(16, d=jnp.float32)
    check("rms_norm", lambda x, w: xla_cpu.rms_norm(x, w, 1e-6), lambda x, w: reference.rms_norm(x, w, 1e-6),
          x, scale_w)
    check("add_bias", xla_cpu.add_bias, reference.add_bias, x, bias)
    acc = xla_cpu.gate_up_dtype(dt)  # the CPU backend's gate/up arrive as f32 accumulators at 16 bits
    gate, up = arr(2, 5, 24, s=3.0, d=jnp.float32), arr(2, 5, 24, d=jnp.float32)
    check("swiglu", lambda g, u: xla_cpu.swiglu(g.astype(acc), u.astype(acc), dt),
          lambda g, u: reference.swiglu(g.astype(dt), u.astype(dt), dt), gate, up)
    B, T = 2, 128
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    segments = jnp.ones((B, T), jnp.int32).at[1, 100:].set(0)
    q, k, v = arr(B, T, 4, 8), arr(B, T, 2, 8), arr(B, T, 2, 8)
    check("self_attention (causal chunks)",
          lambda q, k, v: xla_cpu.self_attention(q, k, v, positions, segments, sliding_window=None),
          lambda q, k, v: reference.self_attention(q, k, v, positions, segments, sliding_window=None), q, k, v)
    check("attention over other keys",
          lambda q, k, v: xla_cpu.attention(q[:, :16], k, v, positions[:, :16] + T, positions, segments[:, :16],
                                            segments, sliding_window=40),
          lambda q, k, v: reference.attention(q[:, :16], k, v, positions[:, :16] + T, positions, segments[:, :16],
                                              segments, sliding_window=40), q, k, v)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_cached_forward_equals_across_backends(dtype):
    """Prefill then one cached step under each backend (xla_cpu stores a 16-bit cache as uint16 bits, reference
    in the compute dtype): the same hidden states, and the same K/V once loaded."""
    cfgs = {ops: _cfg("qwen2", dtype, ops) for ops in ("xla_cpu", "reference")}
    params = init_model(cfgs["reference"], seed=2).params
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 64, (2, 7)), jnp.int32)
    out = {}
    for ops, cfg in cfgs.items():
        cache = init_cache(cfg, 2, 8)
        assert cache["k"][0].dtype == ops_for(cfg).cache_store_dtype(cfg.dtype)
        step = jax.jit(lambda p, t, pos, c, cfg=cfg: hidden_states(p, cfg, t, pos, cache=c))
        h1, cache = step(params, tokens[:, :6], None, cache)
        h2, cache = step(params, tokens[:, 6:], jnp.full((2, 1), 6), cache)
        out[ops] = (h1, h2, ops_for(cfg).cache_load(cache["k"][1], cfg.dtype))
    if dtype == "bfloat16":
        assert cache["k"][0].dtype == jnp.bfloat16  # the reference stores the compute dtype
    for a, b, what in zip(out["xla_cpu"], out["reference"], ("prefill", "decode step", "layer-1 keys")):
        _close(a, b, dtype, what)


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_auto_follows_the_process_backend(monkeypatch, backend):
    """A process whose default backend is a GPU or TPU (faked here) computes the model with the reference ops."""
    cfg = _cfg("qwen2", "bfloat16", "auto")
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    assert resolved_ops(cfg) == "reference"
    with compiling_for("cpu"):  # a CPU compile from that process (e.g. a host-side program) takes the CPU forms
        assert resolved_ops(cfg) == "xla_cpu"


def test_auto_picks_the_reference_off_cpu_and_its_graph_has_no_cpu_rewrite():
    """model.ops=auto: xla_cpu when compiling for CPU, reference for a GPU or TPU (faked with `compiling_for`,
    as a compile-only rehearsal does); the gradient graph traced for a TPU holds no custom VJP and no while loop,
    the CPU one both."""
    cfg = _cfg("qwen2", "bfloat16", "auto")
    assert resolved_ops(cfg) == "xla_cpu" and jax.default_backend() == "cpu"
    for platform in ("gpu", "tpu"):
        with compiling_for(platform):
            assert resolved_ops(cfg) == "reference" and ops_for(cfg) is reference
            assert resolved_ops(dataclasses.replace(cfg, ops="xla_cpu")) == "xla_cpu"  # an explicit choice holds
    assert resolved_ops(dataclasses.replace(cfg, ops="reference")) == "reference"
    params = init_model(cfg, seed=0).params
    tokens = jnp.zeros((2, 8), jnp.int32)

    def grad_jaxpr():
        return str(jax.make_jaxpr(jax.grad(lambda p: forward(p, cfg, tokens).astype(jnp.float32).sum()))(params))

    with compiling_for("tpu"):
        tpu = grad_jaxpr()
    cpu = grad_jaxpr()
    assert "custom_vjp_call" not in tpu and "while[" not in tpu
    assert "custom_vjp_call" in cpu and "while[" in cpu
    with pytest.raises(ValueError, match="model.ops='fast'"):
        ModelConfig(ops="fast")
