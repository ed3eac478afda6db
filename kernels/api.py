"""Attention kernels behind one API: reference (plain XLA) and the faster implementations.

Every implementation takes q (B, Tq, H, D), k and v (B, Tk, KV, D), query and key positions and segment
ids (segment 0 is padding), and returns (out, lse). `attention` picks one by name.
"""
from collections.abc import Callable

import jax
import jax.numpy as jnp
from rlpt.kernels.blockwise import blockwise_attention
from rlpt.kernels.flash import flash_attention
from rlpt.kernels.mask import attention_mask, default_positions_and_segments
from rlpt.kernels.reference import reference_attention
from rlpt.kernels.ring import (
    allgather_attention,
    make_context_parallel_attention,
    make_ring_attention,
    ring_attention,
)

# "ring" / "allgather" read the mesh set by jax.set_mesh and shard the sequence over its "seq" axis.
SEQUENCE_SHARDED_IMPLS = ("ring", "allgather")
ATTENTION_IMPLS: dict[str, Callable] = {
    "reference": reference_attention,
    "blockwise": blockwise_attention,
    "flash": flash_attention,
    "ring": ring_attention,
    "allgather": allgather_attention,
}


def register_attention(name: str):
    def wrap(fn):
        ATTENTION_IMPLS[name] = fn
        return fn
    return wrap


def attention(q, k, v, *, q_positions=None, kv_positions=None, q_segment_ids=None, kv_segment_ids=None,
              causal=True, sliding_window=None, scale=None, logit_softcap=None, impl="reference",
              return_lse=False, **impl_options):
    """Dispatch to the attention implementation `impl`; returns out, or (out, lse) with return_lse.

    impl_options go to the implementation only (e.g. block_q / block_k for blockwise, ring and flash;
    axis for ring / allgather; interpret for flash).
    """
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"unknown attention impl {impl!r}; known: {sorted(ATTENTION_IMPLS)}")
    q_positions, kv_positions, q_segment_ids, kv_segment_ids = default_positions_and_segments(
        q, k, q_positions, kv_positions, q_segment_ids, kv_segment_ids)
    out, lse = ATTENTION_IMPLS[impl](q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids,
                                      causal=causal, sliding_window=sliding_window, scale=scale,
                                      logit_softcap=logit_softcap, **impl_options)
    return (out, lse) if return_lse else out


def attention_over_two_key_sets(q, q_positions, q_segment_ids, first: tuple, second: tuple, *, causal=True,
                                sliding_window=None, impl="reference"):
    """Attention of q (B, T, H, Dh) over the union of two key sets, each (k, v, positions, segment_ids) with
    k, v (B, S_i, KV, Dh): one `attention` call per set, merged by their log-sum-exps (exact; each set may be in
    its own column layout). A query that sees no key of a set gets weight 0 from it; one that sees none at all, 0."""
    parts = [attention(q, k, v, q_positions=q_positions, kv_positions=kpos, q_segment_ids=q_segment_ids,
                       kv_segment_ids=kseg, causal=causal, sliding_window=sliding_window, impl=impl, return_lse=True)
             for k, v, kpos, kseg in (first, second)]
    (o1, l1), (o2, l2) = parts  # out (B, T, H, Dh), lse (B, H, T) f32, -inf where a query saw nothing
    top = jax.lax.stop_gradient(jnp.maximum(l1, l2))  # any shift gives the same value: keep it out of the grad
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    w1, w2 = jnp.exp(l1 - top), jnp.exp(l2 - top)
    total = w1 + w2
    w1, w2 = (jnp.transpose(w / jnp.where(total > 0, total, 1.0), (0, 2, 1))[..., None] for w in (w1, w2))
    return (o1.astype(jnp.float32) * w1 + o2.astype(jnp.float32) * w2).astype(q.dtype)


__all__ = ["attention", "attention_mask", "attention_over_two_key_sets", "reference_attention", "blockwise_attention",
           "flash_attention", "ring_attention", "allgather_attention", "make_ring_attention",
           "make_context_parallel_attention", "register_attention", "ATTENTION_IMPLS", "SEQUENCE_SHARDED_IMPLS"]
