"""The attention mask every implementation shares, built from positions and segment ids."""
import jax.numpy as jnp


def attention_mask(q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, causal, sliding_window):
    """Boolean mask (B, 1, Tq, Tk): True where query i may attend to key j.

    Segment 0 is padding and attends to nothing; tokens attend only within their own segment.
    Built from global positions, so it is exact for contiguous, zigzag, striped and packed layouts.
    """
    qs = q_segment_ids[:, :, None]  # (B, Tq, 1)
    ks = kv_segment_ids[:, None, :]  # (B, 1, Tk)
    mask = (qs == ks) & (qs != 0)
    qp = q_positions[:, :, None]
    kp = kv_positions[:, None, :]
    if causal:
        mask &= qp >= kp
    if sliding_window is not None:
        mask &= (qp - kp) < sliding_window
        if not causal:
            mask &= (kp - qp) < sliding_window
    return mask[:, None]


def default_positions_and_segments(q, k, q_positions, kv_positions, q_segment_ids, kv_segment_ids):
    """Fill in arange positions and an all-ones segment for arguments left as None."""
    B, Tq = q.shape[:2]
    Tk = k.shape[1]
    if q_positions is None:
        q_positions = jnp.broadcast_to(jnp.arange(Tq, dtype=jnp.int32), (B, Tq))
    if kv_positions is None:
        kv_positions = jnp.broadcast_to(jnp.arange(Tk, dtype=jnp.int32), (B, Tk))
    if q_segment_ids is None:
        q_segment_ids = jnp.ones((B, Tq), jnp.int32)
    if kv_segment_ids is None:
        kv_segment_ids = jnp.ones((B, Tk), jnp.int32)
    return q_positions, kv_positions, q_segment_ids, kv_segment_ids
