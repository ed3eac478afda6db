"""DAPO batch shaping: dynamic sampling (drop zero-variance groups), overlong filter and penalty."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def dynamic_sampling_keep(rewards: jax.Array, group_ids: jax.Array, num_groups: int, tol: float = 0.0):
    """Which groups carry a learning signal: those whose rewards are not all equal (max - min > tol).

    rewards (N,), group_ids (N,) in [0, num_groups). Returns (keep_groups (num_groups,) bool,
    keep_rows (N,) bool). Empty groups are dropped. The caller keeps sampling new prompts and appends the kept
    groups until the batch is full (DAPO's refill); `kept_row_indices` turns the mask into indices on host.
    """
    r = rewards.astype(jnp.float32)
    hi = jax.ops.segment_max(r, group_ids, num_groups)
    lo = jax.ops.segment_min(r, group_ids, num_groups)
    count = jax.ops.segment_sum(jnp.ones_like(r), group_ids, num_groups)
    keep_groups = (count > 0) & (hi - lo > tol)
    return keep_groups, keep_groups[group_ids]


def kept_row_indices(keep_rows) -> np.ndarray:
    """Host helper: indices (K,) of kept rows, in order, for gathering the surviving samples."""
    return np.nonzero(np.asarray(keep_rows))[0]


def overlong_filter(mask: jax.Array, truncated: jax.Array) -> jax.Array:
    """Zero the loss mask (B, T) of rows that hit the length limit (truncated (B,) bool)."""
    return mask * (1 - truncated.astype(mask.dtype))[:, None]


def soft_overlong_penalty(lengths: jax.Array, max_length: int, cache_length: int,
                          penalty_factor: float = 1.0) -> jax.Array:
    """DAPO's soft overlong punishment (paper eq. 13) -> (B,) reward to add, in [-penalty_factor, 0].

    With L_max = max_length and L_cache = cache_length:
        0                                   if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
        -1                                  if |y| > L_max
    all times penalty_factor (verl's overlong_buffer.penalty_factor).
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"need 0 < cache_length <= max_length; got cache_length={cache_length}, "
                         f"max_length={max_length}")
    expected = max_length - cache_length
    y = lengths.astype(jnp.float32)
    pen = jnp.clip((expected - y) / cache_length, -1.0, 0.0)
    return penalty_factor * pen
