"""Importance correction between rollout (sampler) and trainer log-probs: TIS (truncate) or MIS (mask)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.algos.policy_losses import masked_mean

LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask")


def rollout_correction(trainer_logp: jax.Array, rollout_logp: jax.Array, mask: jax.Array, *,
                       level: str = "token", mode: str = "truncate", cap: float = 2.0,
                       cap_low: float | None = None, log_ratio_clamp: float = 20.0):
    """Weights w = pi_trainer / pi_rollout against sampler/trainer mismatch -> (weights, keep, metrics).

    trainer_logp, rollout_logp, mask: (B, T). level: "token" (one ratio per token), "sequence" (product of
    the row's token ratios), "geometric" (geometric mean of them). mode "truncate" (TIS): w = min(w, cap)
    (and max(w, cap_low) if given); mode "mask" (MIS): w is kept where cap_low <= w <= cap, else 0.
    weights (B, T) are a stop-gradient factor for the per-token policy loss; keep (B, T) is 1 where the
    token survived (all 1 for TIS). The log-ratio is clamped to +-log_ratio_clamp before exp (as verl).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown correction level {level!r}; known: {list(LEVELS)}")
    if mode not in MODES:
        raise ValueError(f"unknown correction mode {mode!r}; known: {list(MODES)}")
    m = mask.astype(jnp.float32)
    log_w = (trainer_logp - rollout_logp).astype(jnp.float32) * m
    if level == "sequence":
        log_w = jnp.sum(log_w, axis=-1, keepdims=True)
    elif level == "geometric":
        log_w = jnp.sum(log_w, axis=-1, keepdims=True) / jnp.maximum(jnp.sum(m, axis=-1, keepdims=True), 1.0)
    w = jnp.broadcast_to(jnp.exp(jnp.clip(log_w, -log_ratio_clamp, log_ratio_clamp)), m.shape)
    lo = 0.0 if cap_low is None else cap_low
    out_of_range = (w > cap) | (w < lo)
    if mode == "truncate":
        weights = jnp.clip(w, lo, cap)
        keep = jnp.ones_like(m)
    else:
        keep = 1.0 - out_of_range.astype(jnp.float32)
        weights = w * keep
    d = (trainer_logp - rollout_logp).astype(jnp.float32)  # k3 below estimates KL(rollout || trainer)
    metrics = {
        "is_weight_mean": masked_mean(weights, m),
        "is_out_of_range_frac": masked_mean(out_of_range.astype(jnp.float32), m),
        "logprob_abs_gap": masked_mean(jnp.abs(d), m),
        "mismatch_kl_k3": masked_mean(jnp.exp(d) - d - 1.0, m),
    }
    return jax.lax.stop_gradient(weights * m), keep * m, metrics
