"""A tiny model's training loss and gradients with the sequence sharded over seq=8 (ring) match unsharded."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from rlpt.kernels.layouts import apply_layout

from rlpt.models.config import ModelConfig
from rlpt.models.transformer import forward, init_params

SEQ = 8


def _loss(params, cfg, tokens, positions, segments, targets):
    """Mean next-token cross-entropy; targets were shifted in token order before any layout permutation."""
    logits = forward(params, cfg, tokens, positions, segments).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    mask = (targets >= 0) & (segments != 0)
    return jnp.sum(jnp.where(mask, nll, 0.0)) / jnp.sum(mask)


def _step(T, seed=0):
    """[(loss, grads)] unsharded with blockwise attention, then sharded over seq with ring + zigzag."""
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2,
                num_kv_heads=1, max_position_embeddings=T, param_dtype="float32", compute_dtype="float32")
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 64, (1, T + 1)).astype(np.int32)
    # two packed documents, positions restarting at the boundary
    cut = T // 3
    positions = np.concatenate([np.arange(cut), np.arange(T - cut)]).astype(np.int32)[None]
    segments = np.concatenate([np.ones(cut), 2 * np.ones(T - cut)]).astype(np.int32)[None]
    inputs, targets = tokens[:, :-1], tokens[:, 1:].copy()
    targets[0, cut - 1] = -1  # no target across the document boundary
    results = []
    for impl in ("blockwise", "ring"):
        cfg = ModelConfig(**base, attention_impl=impl)
        params = init_params(cfg, jax.random.key(seed))
        batch = [inputs, positions, segments, targets]
        grad_fn = jax.jit(jax.value_and_grad(_loss), static_argnums=1)
        if impl == "blockwise":
            loss, grads = grad_fn(params, cfg, *map(jnp.asarray, batch))
        else:
            batch = [apply_layout(x, "zigzag", SEQ) for x in batch]  # once, in the data pipeline
            mesh = jax.make_mesh((1, 1, 1, SEQ), ("data", "fsdp", "tensor", "seq"),
                                 axis_types=(AxisType.Auto,) * 4)
            with jax.set_mesh(mesh):
                loss, grads = grad_fn(params, cfg, *map(jnp.asarray, batch))
        results.append((float(loss), grads))
    return results


def _check(T):
    (loss_ref, g_ref), (loss_ring, g_ring) = _step(T)
    assert abs(loss_ring - loss_ref) <= 1e-5 * abs(loss_ref), (loss_ring, loss_ref)
    for a, b in zip(jax.tree.leaves(g_ring), jax.tree.leaves(g_ref)):
        tol = 1e-5 * max(1.0, float(jnp.abs(b).max()))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol)


def test_ring_training_step_matches_unsharded_small():
    _check(128)


@pytest.mark.slow
def test_ring_training_step_matches_unsharded_at_16k():
    _check(int(os.environ.get("RLPT_LONG_T", 16384)))
