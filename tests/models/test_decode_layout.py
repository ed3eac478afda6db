"""The feature-major decode step (`rlpt.models.decode`) computes what the row-major cached forward computes."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models import ModelConfig, init_model
from rlpt.models.ops.xla_cpu_decode import decode_logits, decode_params
from rlpt.models.transformer import hidden_states, init_cache, logits_from_hidden

BASE = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
                   initializer_range=0.3)
VARIANTS = {
    "plain": {},
    "biases_untied": dict(qkv_bias=True, o_bias=True, mlp_bias=True, tie_embeddings=False),
    "qk_norm_mqa": dict(family="qwen3", qk_norm=True, num_kv_heads=1),
    "sliding_window": dict(sliding_window=3),
}


def _model(name, dtype):
    model = init_model(dataclasses.replace(BASE, compute_dtype=dtype, **VARIANTS[name]), seed=2)
    rng = np.random.default_rng(0)  # non-zero biases and norm scales, so each is exercised
    layers = {k: v + rng.normal(0, 0.3, v.shape).astype(v.dtype) if k.startswith(("b", "q_norm", "k_norm"))
              else v for k, v in model.params["layers"].items()}
    return model.config, dict(model.params, layers=layers)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_decode_logits_equal_the_row_major_cached_forward(name, dtype):
    cfg, params = _model(name, dtype)
    rng = np.random.default_rng(1)
    lengths = np.array([5, 2, 7])
    tokens = rng.integers(0, cfg.vocab_size, (3, 8)).astype(np.int32)
    segments = (np.arange(8)[None] < lengths[:, None]).astype(np.int32)
    cache = jax.jit(lambda p, t, s: hidden_states(p, cfg, t, None, s, cache=init_cache(cfg, 3, 12))[1])(
        params, tokens, segments)
    cache = dict(cache, index=jnp.asarray(lengths, jnp.int32))
    new, active = jnp.asarray([3, 60, 17], jnp.int32), jnp.asarray([1, 1, 0], jnp.int32)  # the last row is done
    positions = jnp.asarray(lengths, jnp.int32)

    @jax.jit
    def row_major(params, cache):
        hidden, cache = hidden_states(params, cfg, new[:, None], positions[:, None], active[:, None], cache=cache,
                                      cache_window=8)
        return logits_from_hidden(params, cfg, hidden)[:, 0], cache

    @jax.jit
    def feature_major(params, cache):
        return decode_logits(decode_params(params, cfg), cfg, new, positions, active, cache, window=8)

    (want, want_cache), (got, got_cache) = row_major(params, cache), feature_major(params, cache)
    assert got.shape == want.shape == (3, cfg.vocab_size) and got.dtype == want.dtype
    f32 = lambda a: np.asarray(jnp.asarray(a).astype(jnp.float32))  # noqa: E731
    scale = float(np.abs(f32(want)).max())
    # The two layouts sum the products in other orders: f32 agrees to rounding; bf16 rounds each activation,
    # so it can differ by a few bf16 steps of the logits' scale.
    tol = 1e-5 if dtype == "float32" else 3e-2
    np.testing.assert_allclose(f32(got), f32(want), rtol=0, atol=tol * scale)
    for key in ("positions", "segment_ids", "index"):
        np.testing.assert_array_equal(got_cache[key], want_cache[key])
    for key in ("k", "v"):
        for g, w in zip(got_cache[key], want_cache[key], strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            g, w = (jax.lax.bitcast_convert_type(a, cfg.dtype) if a.dtype == jnp.uint16 else a for a in (g, w))
            np.testing.assert_allclose(f32(g), f32(w), rtol=0, atol=tol * max(1.0, float(np.abs(f32(w)).max())))


def test_decode_params_lay_each_projection_out_as_out_by_in():
    cfg, params = _model("biases_untied", "float32")
    dp = decode_params(params, cfg)
    H, KV, Dh, D, F, V = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size, cfg.intermediate_size,
                          cfg.vocab_size)
    lp, layer = dp["layers"][1], jax.tree.map(lambda a: a[1], params["layers"])
    assert lp["wqkv"].shape == ((H + 2 * KV) * Dh, D) and lp["w_gate_up"].shape == (2 * F, D)
    np.testing.assert_array_equal(lp["wqkv"][H * Dh:(H + KV) * Dh], layer["wk"].reshape(D, KV * Dh).T)
    np.testing.assert_array_equal(lp["w_gate_up"][F:], layer["w_up"].T)
    np.testing.assert_array_equal(lp["wo"], layer["wo"].reshape(H * Dh, D).T)
    np.testing.assert_array_equal(lp["w_down"], layer["w_down"].T)
    np.testing.assert_array_equal(dp["head"], params["lm_head"].T)
    assert dp["head"].shape == (V, D) and lp["bo"].shape == (D, 1)
