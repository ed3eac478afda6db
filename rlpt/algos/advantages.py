"""Advantage estimators (GRPO, Dr.GRPO, RLOO, REINFORCE++, GAE), chosen by name from `ADVANTAGES`.

Layout: one row per sampled response. `group_ids` (B,) int in [0, num_groups) names the prompt each row
answers (rows of a group need not be adjacent, groups may differ in size); `num_groups` is static.
Every registered estimator has the signature

    fn(rewards, mask, group_ids, *, num_groups, values=None, **cfg) -> (advantages (B, T), returns (B, T))

where `rewards` is (B,) outcome scores or (B, T) token rewards (e.g. with a KL penalty folded in; an outcome
estimator then scores a row by the masked sum of its token rewards, as verl does) and `mask` (B, T) is 1 on
policy-generated tokens. Outputs are zero where mask is 0.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rlpt.algos.registry import Registry

ADVANTAGES = Registry("advantage estimator")
register_advantage = ADVANTAGES.register
get_advantage = ADVANTAGES.lookup


def sequence_scores(rewards: jax.Array, mask: jax.Array) -> jax.Array:
    """(B,) or (B, T) rewards -> (B,) scores: outcome rewards as given, token rewards summed under mask."""
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    if rewards.ndim == 1:
        if rewards.shape[0] != mask.shape[0]:
            raise ValueError(f"rewards {rewards.shape} and mask {mask.shape} disagree on B")
        return rewards
    if rewards.shape != mask.shape:
        raise ValueError(f"token rewards {rewards.shape} and mask {mask.shape} must have the same shape")
    return jnp.sum(rewards * mask, axis=-1)


def outcome_token_rewards(rewards: jax.Array, mask: jax.Array) -> jax.Array:
    """Place each (B,) outcome reward on its row's last policy token -> (B, T); empty rows stay zero."""
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    t = mask.shape[-1]
    last = t - 1 - jnp.argmax(jnp.flip(mask, axis=-1) > 0, axis=-1)  # (B,)
    onehot = jax.nn.one_hot(last, t, dtype=rewards.dtype) * (jnp.sum(mask, axis=-1) > 0)[:, None]
    return onehot * rewards[:, None]


def group_stats(scores: jax.Array, group_ids: jax.Array, num_groups: int):
    """Per-row group mean, Bessel-corrected group std (0 for groups of one) and group size, each (B,)."""
    ones = jnp.ones_like(scores)
    count = jax.ops.segment_sum(ones, group_ids, num_groups)  # (num_groups,)
    mean = jax.ops.segment_sum(scores, group_ids, num_groups) / jnp.maximum(count, 1.0)
    sq = jax.ops.segment_sum((scores - mean[group_ids]) ** 2, group_ids, num_groups)
    std = jnp.where(count > 1, jnp.sqrt(sq / jnp.maximum(count - 1.0, 1.0)), 0.0)
    return mean[group_ids], std[group_ids], count[group_ids]


def group_normalized_advantages(
    scores: jax.Array, group_ids: jax.Array, num_groups: int, scale: str = "group", eps: float = 1e-6
) -> jax.Array:
    """GRPO: (score - group mean) / (std + eps) -> (B,).

    scale: "group" (std of the row's group), "batch" (std of all B scores, TRL scale_rewards="batch") or
    "none" (mean-centred only: Dr.GRPO). std is Bessel-corrected as in verl and TRL.
    """
    mean, std, _ = group_stats(scores, group_ids, num_groups)
    centred = scores - mean
    if scale == "group":
        return centred / (std + eps)
    if scale == "batch":
        return centred / (jnp.std(scores, ddof=1) + eps)
    if scale == "none":
        return centred
    raise ValueError(f"unknown GRPO scale {scale!r}; known: ['batch', 'group', 'none']")


def rloo_advantages(scores: jax.Array, group_ids: jax.Array, num_groups: int) -> jax.Array:
    """RLOO: score minus the mean of the *other* rows of its group -> (B,); 0 for groups of one."""
    mean, _, count = group_stats(scores, group_ids, num_groups)
    return jnp.where(count > 1, (scores - mean) * count / jnp.maximum(count - 1.0, 1.0), 0.0)


# jitted: an eager lax.scan over a fresh closure is traced and lowered again on every call.
@functools.partial(jax.jit, static_argnames=("gamma",))
def discounted_returns(token_rewards: jax.Array, mask: jax.Array, gamma: float = 1.0) -> jax.Array:
    """G_t = r_t + gamma * G_next over policy tokens only (masked tokens are skipped) -> (B, T)."""

    def step(carry, x):
        r, m = x
        g = jnp.where(m > 0, r + gamma * carry, carry)
        return g, g * m

    _, out = jax.lax.scan(step, jnp.zeros(token_rewards.shape[0], token_rewards.dtype),
                          (token_rewards.T, mask.astype(token_rewards.dtype).T), reverse=True)
    return out.T


def masked_whiten(x: jax.Array, mask: jax.Array, eps: float = 1e-8) -> jax.Array:
    """(x - mean) / sqrt(var + eps) over masked entries of the whole batch (Bessel-corrected var, as verl)."""
    m = mask.astype(x.dtype)
    n = jnp.sum(m)
    mean = jnp.sum(x * m) / jnp.maximum(n, 1.0)
    var = jnp.sum(((x - mean) ** 2) * m) / jnp.maximum(n - 1.0, 1.0)
    return (x - mean) * jax.lax.rsqrt(var + eps) * m


@functools.partial(jax.jit, static_argnames=("gamma", "lam"))
def gae_advantages(token_rewards: jax.Array, values: jax.Array, mask: jax.Array, gamma: float = 1.0,
                   lam: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """GAE over policy tokens (B, T) -> (advantages, returns = advantages + values).

    delta_t = r_t + gamma * V_next - V_t, A_t = delta_t + gamma * lam * A_next, where "next" is the next
    policy token (masked tokens, e.g. tool output inside a multi-turn episode, are skipped; V after the last
    token is 0).
    """

    def step(carry, x):
        next_v, next_a = carry
        r, v, m = x
        delta = r + gamma * next_v - v
        a = delta + gamma * lam * next_a
        keep = m > 0
        return (jnp.where(keep, v, next_v), jnp.where(keep, a, next_a)), a * m

    zeros = jnp.zeros(values.shape[0], values.dtype)
    xs = (token_rewards.T, values.T, mask.astype(values.dtype).T)
    _, adv = jax.lax.scan(step, (zeros, zeros), xs, reverse=True)
    adv = adv.T
    return adv, (adv + values) * mask


def _broadcast(per_row: jax.Array, mask: jax.Array) -> jax.Array:
    return per_row[:, None] * mask.astype(per_row.dtype)


@register_advantage("grpo")
def grpo(rewards, mask, group_ids, *, num_groups, values=None, scale="group", eps=1e-6):
    """GRPO group-normalised outcome advantage, broadcast to every policy token of the row."""
    scores = sequence_scores(rewards, mask)
    adv = group_normalized_advantages(scores, group_ids, num_groups, scale=scale, eps=eps)
    return _broadcast(adv, mask), _broadcast(scores, mask)


@register_advantage("dr_grpo")
def dr_grpo(rewards, mask, group_ids, *, num_groups, values=None):
    """Dr.GRPO: group mean-centred outcome advantage, no std division."""
    scores = sequence_scores(rewards, mask)
    adv = group_normalized_advantages(scores, group_ids, num_groups, scale="none")
    return _broadcast(adv, mask), _broadcast(scores, mask)


@register_advantage("rloo")
def rloo(rewards, mask, group_ids, *, num_groups, values=None):
    """RLOO leave-one-out baseline, broadcast to tokens."""
    scores = sequence_scores(rewards, mask)
    return _broadcast(rloo_advantages(scores, group_ids, num_groups), mask), _broadcast(scores, mask)


@register_advantage("reinforce_pp")
def reinforce_pp(rewards, mask, group_ids, *, num_groups, values=None, gamma=1.0, eps=1e-8):
    """REINFORCE++ (no baseline): discounted token returns, whitened over all policy tokens of the batch."""
    token_r = outcome_token_rewards(rewards, mask) if rewards.ndim == 1 else rewards * mask
    returns = discounted_returns(token_r, mask, gamma)
    return masked_whiten(returns, mask, eps), returns


@register_advantage("reinforce_pp_baseline")
def reinforce_pp_baseline(rewards, mask, group_ids, *, num_groups, values=None, eps=1e-8):
    """REINFORCE++-baseline: score minus its group mean, broadcast, then whitened over the batch's tokens."""
    scores = sequence_scores(rewards, mask)
    centred = group_normalized_advantages(scores, group_ids, num_groups, scale="none")
    token_adv = _broadcast(centred, mask)
    return masked_whiten(token_adv, mask, eps), _broadcast(scores, mask)


@register_advantage("gae")
def gae(rewards, mask, group_ids, *, num_groups, values=None, gamma=1.0, lam=1.0, whiten=True, eps=1e-8):
    """PPO's GAE with a value head; `values` (B, T) required; advantages whitened over the batch if whiten."""
    if values is None:
        raise ValueError("advantage estimator 'gae' needs values (B, T) from a value head; got None")
    token_r = outcome_token_rewards(rewards, mask) if rewards.ndim == 1 else rewards * mask
    adv, returns = gae_advantages(token_r, values, mask, gamma, lam)
    return (masked_whiten(adv, mask, eps) if whiten else adv), returns
