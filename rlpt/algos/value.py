"""PPO value-head loss (clipped, as PPO2 / verl / OpenRLHF)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.algos.policy_losses import masked_mean


def value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array, mask: jax.Array, *,
               clip: float | None = 0.2):
    """Per-token 0.5 * max((V - R)^2, (V_clip - R)^2) with V_clip = V_old + clip(V - V_old, -clip, clip).

    values (B, T) from the current value head (gradients flow), old_values (B, T) from rollout time, returns
    (B, T) targets (e.g. GAE returns). clip=None gives the plain 0.5 (V - R)^2. Returns
    (per_token_loss (B, T), metrics); aggregate with rlpt.algos.aggregation like the policy loss.
    """
    old_values = jax.lax.stop_gradient(old_values)
    returns = jax.lax.stop_gradient(returns)
    unclipped = (values - returns) ** 2
    if clip is None:
        loss = 0.5 * unclipped
        clip_frac = jnp.zeros((), jnp.float32)
    else:
        v_clipped = old_values + jnp.clip(values - old_values, -clip, clip)
        clipped = (v_clipped - returns) ** 2
        loss = 0.5 * jnp.maximum(unclipped, clipped)
        clip_frac = masked_mean((clipped > unclipped).astype(jnp.float32), mask)
    metrics = {"vf_clip_frac": clip_frac, "value_mean": masked_mean(values, mask),
               "value_error": masked_mean(unclipped, mask)}
    return loss * mask, metrics
