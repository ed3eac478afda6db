"""Attention kernels behind one API: reference (plain XLA) and the faster implementations.

Every implementation takes q (B, Tq, H, D), k and v (B, Tk, KV, D), query and key positions and segment
ids (segment 0 is padding), and returns (out, lse). `attention` picks one by name.
"""
from collections.abc import Callable

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


__all__ = ["attention", "attention_mask", "reference_attention", "blockwise_attention", "flash_attention",
           "ring_attention", "allgather_attention", "make_ring_attention", "make_context_parallel_attention",
           "register_attention", "ATTENTION_IMPLS"]
