"""The model's fused dense attention equals the kernels' reference in values and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt import kernels
from rlpt.models.ops.xla_cpu import attention as dense_attention
from rlpt.models.ops.xla_cpu import causal_chunks
from rlpt.models.ops.xla_cpu import self_attention as dense_self_attention


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


def _assert_matches_reference(attend, q, k, v, pos, seg, window):
    """attend(q, k, v) (jitted with its gradients) equals the kernels' reference in values and gradients;
    returns attend's output."""
    w = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

    def ref(q, k, v):
        out = kernels.attention(q, k, v, q_positions=pos, kv_positions=pos, q_segment_ids=seg,
                                kv_segment_ids=seg, sliding_window=window, impl="reference")
        return jnp.sum(out * w), out

    def mine(q, k, v):
        out = attend(q, k, v)
        return jnp.sum(out * w), out

    (_, o1), g1 = jax.value_and_grad(ref, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    (_, o2), g2 = jax.jit(jax.value_and_grad(mine, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    np.testing.assert_allclose(np.asarray(o2), np.asarray(o1), atol=2e-6)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-5, rtol=1e-5)
    return o2


@pytest.mark.parametrize("window", [None, 5])
def test_dense_matches_reference_values_and_grads(window):
    q, k, v, pos, seg = _inputs(jnp.float32)
    out = _assert_matches_reference(lambda q, k, v: dense_self_attention(q, k, v, pos, seg, sliding_window=window),
                                    q, k, v, pos, seg, window)
    assert float(jnp.abs(out[2, 17:]).max()) == 0.0


@pytest.mark.parametrize("layout", ["packed", "permuted"])
@pytest.mark.parametrize("window", [None, 5])
def test_causal_chunks_match_the_reference(layout, window):
    """Block skipping (4 query chunks over their own and earlier key chunks) gives the reference's values and
    gradients; with columns permuted (a query sees keys in later chunks) the device check runs the full block."""
    q, k, v, pos, seg = _inputs(jnp.float32)
    if layout == "permuted":
        perm = np.random.default_rng(2).permutation(q.shape[1])
        q, k, v, pos, seg = q[:, perm], k[:, perm], v[:, perm], pos[:, perm], seg[:, perm]
    _assert_matches_reference(
        lambda q, k, v: dense_attention(q, k, v, pos, pos, seg, seg, sliding_window=window, causal_chunks=4),
        q, k, v, pos, seg, window)


def test_causal_chunks_skip_the_upper_blocks():
    """With the premise broken only in the skipped blocks' keys, the chunked result would differ: the check must
    see it. A query in the first chunk that may see a key of the last chunk (same segment, lower position)."""
    q, k, v, pos, seg = _inputs(jnp.float32)
    pos = pos.at[0, 23].set(0)  # the last column of row 0 is visible from every earlier query of its segment
    full = dense_attention(q, k, v, pos, pos, seg, seg)
    chunked = dense_attention(q, k, v, pos, pos, seg, seg, causal_chunks=4)
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(full), atol=2e-6)
    assert causal_chunks(256) == 4 and causal_chunks(24) == 1 and causal_chunks(130) == 1
    with pytest.raises(ValueError, match="causal_chunks=4"):
        dense_attention(q, k[:, :20], v[:, :20], pos, pos[:, :20], seg, seg[:, :20], causal_chunks=4)


def test_causal_chunks_in_bf16_equal_the_full_block():
    """bf16 inputs: the chunked core (its own VJP, gradients assembled in f32 and cast once) gives the full
    block's values and gradients up to bf16 rounding, and both stay near the f32 reference."""
    q, k, v, pos, seg = _inputs(jnp.float32)
    q, k, v = (jnp.tile(x, (1, 8, 1, 1)) for x in (q, k, v))  # 192 columns: 4 chunks of 48
    pos, seg = jnp.tile(jnp.arange(192)[None], (3, 1)), jnp.ones((3, 192), jnp.int32)
    w = jnp.asarray(np.random.default_rng(3).normal(size=q.shape), jnp.float32)

    def loss(chunks):
        def f(q, k, v):
            out = dense_attention(q, k, v, pos, pos, seg, seg, causal_chunks=chunks)
            return jnp.sum(out.astype(jnp.float32) * w)
        return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))

    bf = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    (l4, g4), (l1, g1), (lr, gr) = loss(4)(*bf), loss(1)(*bf), loss(1)(q, k, v)
    assert causal_chunks(192) == 4
    for got in (l4, l1):
        assert abs(float(got) - float(lr)) < 2e-2 * abs(float(lr)) + 1.0
    for a, b, r in zip(g4, g1, gr, strict=True):
        assert a.dtype == jnp.bfloat16
        scale = float(jnp.abs(r).max())
        assert float(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32)).max()) < 2e-2 * scale
        assert float(jnp.abs(a.astype(jnp.float32) - r).max()) < 4e-2 * scale


def _zero_blocks(monkeypatch, recomputed: bool) -> int:
    """Zero-filled f32 (B*KV, T*G, S) blocks in the compiled gradient of chunked attention."""
    import re

    import rlpt.models.ops.xla_cpu as tr
    monkeypatch.setattr(tr, "_RECOMPUTED_FALLBACK", recomputed)
    q, k, v, pos, seg = _inputs(jnp.float32)  # B=3, KV=2, G=2, T=S=24: blocks (6, 48, 24)

    def f(q, k, v):
        return jnp.sum(dense_attention(q, k, v, pos, pos, seg, seg, causal_chunks=4))

    hlo = jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(q, k, v).compile().as_text()
    consts = set(re.findall(r"%([\w.-]+) = f32\[\] constant\(0\)", hlo))
    fills = re.findall(r"= f32\[6,48,24\]\{[\d,]+\} (?:broadcast|fusion)\(%([\w.-]+)\)", hlo)
    return sum(c in consts for c in fills)


def test_the_fallback_branch_saves_no_probabilities(monkeypatch):
    """The full-block fallback of the causal-chunk cond keeps only its inputs (`_recomputed_core`): the taken
    chunked branch then has no (B*KV, T*G, S) f32 residual of the other branch to fill with zeros each step.
    Its values and gradients are the reference's (the permuted case of the test above runs it)."""
    assert _zero_blocks(monkeypatch, False) > 0
    assert _zero_blocks(monkeypatch, True) == 0
