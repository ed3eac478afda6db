"""KL estimators to a frozen reference (Schulman's k1/k2/k3), KL-in-reward, and entropy from logits.

Estimators are chosen by name from `KL_ESTIMATORS`: fn(logp, ref_logp) -> (B, T), estimating
KL(pi || ref) per token from log-probs of tokens sampled from pi. Used in the loss (add beta * kl per
token before aggregation, as TRL's GRPO) or in the reward (`kl_in_reward`, as PPO-RLHF and verl's
use_kl_in_reward).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.algos.advantages import outcome_token_rewards
from rlpt.algos.registry import Registry

KL_ESTIMATORS = Registry("KL estimator")
register_kl = KL_ESTIMATORS.register
get_kl = KL_ESTIMATORS.lookup


@register_kl("k1")
def kl_k1(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k1 = log pi - log ref: unbiased, high variance, can be negative."""
    return logp - ref_logp


@register_kl("k2")
def kl_k2(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k2 = (log pi - log ref)^2 / 2: biased, low variance, >= 0."""
    return 0.5 * (logp - ref_logp) ** 2


@register_kl("k3")
def kl_k3(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k3 = ref/pi - 1 - log(ref/pi): unbiased, low variance, >= 0 (TRL's GRPO `per_token_kl`)."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def kl_in_reward(rewards: jax.Array, logp: jax.Array, ref_logp: jax.Array, mask: jax.Array,
                 beta: float, estimator: str = "k1") -> jax.Array:
    """Token rewards with the KL penalty folded in: r_t - beta * kl_t on policy tokens -> (B, T).

    `rewards` is (B,) outcome rewards (placed on the last policy token) or (B, T) token rewards; `logp` are
    the rollout-time log-probs. The penalty is a constant for the optimiser (stop-gradient).
    """
    token_r = outcome_token_rewards(rewards, mask) if rewards.ndim == 1 else rewards * mask
    kl = jax.lax.stop_gradient(get_kl(estimator)(logp, ref_logp))
    return token_r - beta * kl * mask


def entropy_from_logits(logits: jax.Array) -> jax.Array:
    """Entropy of softmax(logits) over the last axis: (B, T, V) -> (B, T), computed in float32.

    An entropy bonus is `-coef * entropy` per token, aggregated like the policy loss.
    """
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    probs = jnp.exp(logits - logz[..., None])
    return logz - jnp.sum(probs * logits, axis=-1)
