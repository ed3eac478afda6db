"""The model's fused dense attention equals the kernels' reference in values and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernels
from rlpt.models.transformer import dense_self_attention


def _inputs(dtype):
    rng = np.random.default_rng(0)
    B, T, H, KV, D = 3, 24, 4, 2, 16
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, n, D)), dtype) for n in (H, KV, KV))
    seg = np.ones((B, T), np.int32)
    pos = np.tile(np.arange(T), (B, 1))
    seg[1, 10:] = 2  # two packed documents
    pos[1, 10:] = np.arange(T - 10)
    seg[2, 17:] = 0  # padding
    seg[1, 20:] = 3  # a third segment
    pos[1, 20:] = np.arange(T - 20)
    return q, k, v, jnp.asarray(pos), jnp.asarray(seg)


@pytest.mark.parametrize("window", [None, 5])
def test_dense_matches_reference_values_and_grads(window):
    q, k, v, pos, seg = _inputs(jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

    def ref(q, k, v):
        out = kernels.attention(q, k, v, q_positions=pos, kv_positions=pos, q_segment_ids=seg,
                                kv_segment_ids=seg, sliding_window=window, impl="reference")
        return jnp.sum(out * w), out

    def dense(q, k, v):
        out = dense_self_attention(q, k, v, pos, seg, sliding_window=window)
        return jnp.sum(out * w), out

    (_, o1), g1 = jax.value_and_grad(ref, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    (_, o2), g2 = jax.value_and_grad(dense, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    np.testing.assert_allclose(np.asarray(o2), np.asarray(o1), atol=2e-6)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-5, rtol=1e-5)
    assert float(jnp.abs(o2[2, 17:]).max()) == 0.0
