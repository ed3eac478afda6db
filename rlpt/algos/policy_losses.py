"""Per-token policy-gradient losses (PPO clip / clip-higher / dual-clip, GSPO, CISPO), chosen by name.

Every registered loss has the signature

    fn(logp, old_logp, advantages, mask, **cfg) -> (per_token_loss (B, T), metrics: dict[str, scalar])

with `logp` the trainer's log-probs of the sampled tokens (B, T) (gradients flow through it), `old_logp` the
behaviour policy's (B, T) (treated as constant), `advantages` (B, T) and `mask` (B, T) 1 on policy tokens.
The loss is not reduced: pass it to `rlpt.algos.aggregation`. Metrics are masked means over this batch.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.algos.registry import Registry

POLICY_LOSSES = Registry("policy loss")
register_policy_loss = POLICY_LOSSES.register
get_policy_loss = POLICY_LOSSES.lookup


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of x over entries where mask is 1 (0 if none); x broadcasts against mask."""
    m = mask.astype(jnp.float32)
    return jnp.sum(jnp.broadcast_to(x, m.shape) * m) / jnp.maximum(jnp.sum(m), 1.0)


def check_token_shapes(**arrays: jax.Array) -> None:
    """Raise ValueError naming the first array whose shape differs from the first (all must be (B, T))."""
    (first, ref), *rest = arrays.items()
    if ref.ndim != 2:
        raise ValueError(f"{first} must be (B, T); got shape {ref.shape}")
    for name, a in rest:
        if a.shape != ref.shape:
            raise ValueError(f"{name} has shape {a.shape}; expected {ref.shape} like {first}")


def _ratio_metrics(ratio: jax.Array, log_ratio: jax.Array, mask: jax.Array) -> dict:
    ratio = jnp.broadcast_to(ratio, mask.shape)
    big = jnp.finfo(ratio.dtype).max
    return {
        "approx_kl": masked_mean(-log_ratio, mask),  # k1 estimate of KL(old || new), as verl's ppo_kl
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_max": jnp.max(jnp.where(mask > 0, ratio, -big)),
        "ratio_min": jnp.min(jnp.where(mask > 0, ratio, big)),
    }


def _clipped_surrogate(ratio, advantages, mask, clip_low, clip_high, dual_clip, ratio_cap):
    """PPO surrogate on a ratio that broadcasts to advantages; shared by ppo and gspo."""
    f32 = jnp.float32
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    if ratio_cap is not None:  # TRL's `delta`: also cap the unclipped branch (INTELLECT-2 two-sided clip)
        ratio = jnp.minimum(ratio, ratio_cap)
    loss1 = -advantages * ratio
    loss2 = -advantages * clipped_ratio
    loss = jnp.maximum(loss1, loss2)
    metrics = {
        "clip_frac": masked_mean((loss2 > loss1).astype(jnp.float32), mask),
        "clip_frac_low": masked_mean(((ratio < 1.0 - clip_low) & (advantages < 0)).astype(f32), mask),
        "clip_frac_high": masked_mean(((ratio > 1.0 + clip_high) & (advantages > 0)).astype(f32), mask),
    }
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (verl uses 3.0); got {dual_clip}")
        loss3 = -advantages * dual_clip
        metrics["dual_clip_frac"] = masked_mean(((advantages < 0) & (loss > loss3)).astype(jnp.float32), mask)
        loss = jnp.where(advantages < 0, jnp.minimum(loss, loss3), loss)
    return loss * mask, metrics


@register_policy_loss("ppo")
def ppo_loss(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.28, dual_clip=None,
             log_ratio_clamp=None, ratio_cap=None):
    """PPO clipped surrogate: max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)) per token.

    clip_high > clip_low is DAPO's clip-higher, rlpt's default (0.28; TRL and verl default to a symmetric 0.2:
    pass clip_high=0.2 for theirs). dual_clip=c (> 1) bounds the loss of negative-advantage
    tokens by -A c (verl always uses c=3; TRL none). log_ratio_clamp=k clamps log r to [-k, k] before exp
    (verl uses 20). ratio_cap caps r in the unclipped branch (TRL `delta`).
    """
    check_token_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    if log_ratio_clamp is not None:
        log_ratio = jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    ratio = jnp.exp(log_ratio)
    loss, metrics = _clipped_surrogate(ratio, advantages, mask, clip_low, clip_high, dual_clip, ratio_cap)
    return loss, {**metrics, **_ratio_metrics(ratio, log_ratio, mask)}


@register_policy_loss("gspo")
def gspo_loss(logp, old_logp, advantages, mask, *, clip_low=3e-4, clip_high=4e-4, dual_clip=None,
              log_ratio_clamp=None, ratio_cap=None):
    """GSPO: the PPO surrogate on the sequence ratio s_i = exp(mean_t log r_t) (geometric mean of token
    ratios), shared by every token of the row. Default clips are the GSPO paper's (3e-4, 4e-4)."""
    check_token_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    n = jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
    seq_log_ratio = jnp.sum(log_ratio * mask, axis=-1, keepdims=True) / n  # (B, 1)
    if log_ratio_clamp is not None:
        seq_log_ratio = jnp.clip(seq_log_ratio, -log_ratio_clamp, log_ratio_clamp)
    ratio = jnp.exp(seq_log_ratio)
    loss, metrics = _clipped_surrogate(ratio, advantages, mask, clip_low, clip_high, dual_clip, ratio_cap)
    return loss, {**metrics, **_ratio_metrics(ratio, log_ratio, mask)}


@register_policy_loss("cispo")
def cispo_loss(logp, old_logp, advantages, mask, *, ratio_max=5.0, ratio_min=None):
    """CISPO: -stop_grad(clip(r, ratio_min, ratio_max)) * A * logp per token.

    Every token keeps a gradient (the IS weight is clipped, not the update). Bounds are absolute ratios:
    TRL's `epsilon_high` for cispo is `ratio_max`; MiniMax's (1 - eps_low, 1 + eps_high) maps directly.
    """
    check_token_shapes(logp=logp, old_logp=old_logp, advantages=advantages, mask=mask)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    ratio = jnp.exp(log_ratio)
    weight = jnp.clip(ratio, ratio_min, ratio_max)
    loss = -jax.lax.stop_gradient(weight) * advantages * logp
    clipped = (ratio > ratio_max) if ratio_min is None else ((ratio > ratio_max) | (ratio < ratio_min))
    metrics = {"clip_frac": masked_mean(clipped.astype(jnp.float32), mask)}
    return loss * mask, {**metrics, **_ratio_metrics(ratio, log_ratio, mask)}
