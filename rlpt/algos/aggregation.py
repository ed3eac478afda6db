"""Loss aggregation modes with an explicit normalisation scope, chosen by name from `AGGREGATIONS`.

Each mode maps a per-token loss (B, T) and mask (B, T) to `(numerator, denominator)`. The denominator never
depends on parameters, so the train step chooses the scope:

- micro-batch scope: loss = num / den per micro-batch (then averaged over micro-batches);
- optimizer-step scope: den_total = sum of the micro-batches' denominators, computed before the step
  (`step_denominator`), and each micro-batch contributes num / den_total; gradients are summed. This equals
  one big batch, however the step is split into micro-batches or devices.

A "sequence" is a row with at least one policy token; all-padding rows count for nothing.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.algos.policy_losses import check_token_shapes
from rlpt.algos.registry import Registry

AGGREGATIONS = Registry("loss aggregation")
register_aggregation = AGGREGATIONS.register
get_aggregation = AGGREGATIONS.lookup


def _num_seqs(mask: jax.Array) -> jax.Array:
    return jnp.sum((jnp.sum(mask, axis=-1) > 0).astype(jnp.float32))


@register_aggregation("token-mean")
def token_mean(loss: jax.Array, mask: jax.Array):
    """Every policy token weighs the same: (sum_bt l m, sum_bt m). verl/OpenRLHF default; TRL bnpo/dapo."""
    m = mask.astype(loss.dtype)
    return jnp.sum(loss * m), jnp.sum(m).astype(jnp.float32)


@register_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(loss: jax.Array, mask: jax.Array):
    """Mean over sequences of each sequence's token mean: (sum_b mean_t l, #seqs). TRL `grpo`, GRPO paper."""
    m = mask.astype(loss.dtype)
    per_seq = jnp.sum(loss * m, axis=-1) / jnp.maximum(jnp.sum(m, axis=-1), 1.0)
    return jnp.sum(per_seq), _num_seqs(mask)


@register_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(loss: jax.Array, mask: jax.Array):
    """Mean over sequences of each sequence's token sum: (sum_bt l m, #seqs)."""
    m = mask.astype(loss.dtype)
    return jnp.sum(loss * m), _num_seqs(mask)


@register_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(loss: jax.Array, mask: jax.Array, *, norm_constant: float):
    """Dr.GRPO: token sums divided by a fixed length: (sum_bt l m, #seqs * norm_constant).

    `norm_constant` is required (e.g. the max response length) so the scale never drifts with padding.
    """
    if norm_constant is None or norm_constant <= 0:
        raise ValueError(f"seq-mean-token-sum-norm needs a positive norm_constant; got {norm_constant!r}")
    m = mask.astype(loss.dtype)
    return jnp.sum(loss * m), _num_seqs(mask) * norm_constant


def aggregate(loss: jax.Array, mask: jax.Array, mode: str, **cfg) -> jax.Array:
    """Micro-batch scope: reduce (B, T) to a scalar num / den (0 when den is 0)."""
    check_token_shapes(loss=loss, mask=mask)
    num, den = get_aggregation(mode)(loss, mask, **cfg)
    return num / jnp.maximum(den, jnp.finfo(jnp.float32).tiny)


def step_denominator(masks: list[jax.Array] | jax.Array, mode: str, **cfg) -> jax.Array:
    """Optimizer-step scope: the summed denominator of all micro-batch masks of one step (a list of (B, T)
    or one stacked (M, B, T) array)."""
    fn = get_aggregation(mode)
    dens = [fn(jnp.zeros(m.shape, jnp.float32), m, **cfg)[1] for m in masks]
    return jnp.sum(jnp.stack(dens))


def aggregate_with_denominator(loss: jax.Array, mask: jax.Array, mode: str, denominator: jax.Array,
                               **cfg) -> jax.Array:
    """Optimizer-step scope: this micro-batch's numerator over the step's total denominator."""
    check_token_shapes(loss=loss, mask=mask)
    num, _ = get_aggregation(mode)(loss, mask, **cfg)
    return num / jnp.maximum(jax.lax.stop_gradient(denominator), jnp.finfo(jnp.float32).tiny)
