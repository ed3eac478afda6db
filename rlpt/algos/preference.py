"""Preference losses on sequence log-prob sums (DPO family, SimPO, ORPO, KTO) and the Bradley-Terry RM loss.

Paired losses take a `PairedLogps` of (B,) arrays; KTO takes an `UnpairedLogps`. Each registered loss returns
(loss scalar = mean over examples, metrics dict of scalars) with the implied rewards, their margin and
accuracy. Formulas follow TRL 1.16 (DPOTrainer, CPOTrainer for SimPO, ORPOTrainer, KTOTrainer, RewardTrainer).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.nn import log_sigmoid

from rlpt.algos.registry import Registry

PREFERENCE_LOSSES = Registry("preference loss")
register_preference_loss = PREFERENCE_LOSSES.register
get_preference_loss = PREFERENCE_LOSSES.lookup
REFERENCE_FREE = frozenset({"simpo", "orpo"})


class PairedLogps(NamedTuple):
    """Summed response log-probs for B (prompt, chosen, rejected) pairs; every field is (B,).

    Reference fields may be None for reference-free losses; lengths (response token counts) are needed by
    the length-normalised losses (ipo, simpo, orpo).
    """

    chosen: jax.Array
    rejected: jax.Array
    ref_chosen: jax.Array | None = None
    ref_rejected: jax.Array | None = None
    chosen_lengths: jax.Array | None = None
    rejected_lengths: jax.Array | None = None


class UnpairedLogps(NamedTuple):
    """KTO inputs, (B,) each: summed log-probs of (prompt, completion) under policy and reference, labels
    (True = desirable), and both models' log-probs of mismatched completions (prompt i with completion i-1)
    that estimate the reference point z0 = max(0, mean(kl - ref_kl))."""

    logps: jax.Array
    ref_logps: jax.Array
    labels: jax.Array
    kl_logps: jax.Array
    ref_kl_logps: jax.Array


def _need(batch, name: str, loss: str):
    value = getattr(batch, name)
    if value is None:
        raise ValueError(f"preference loss {loss!r} needs PairedLogps.{name}; got None")
    return value


def _reward_metrics(chosen_rewards, rejected_rewards) -> dict:
    chosen_rewards = jax.lax.stop_gradient(chosen_rewards)
    rejected_rewards = jax.lax.stop_gradient(rejected_rewards)
    return {
        "rewards_chosen": jnp.mean(chosen_rewards),
        "rewards_rejected": jnp.mean(rejected_rewards),
        "reward_accuracy": jnp.mean((chosen_rewards > rejected_rewards).astype(jnp.float32)),
        "reward_margin": jnp.mean(chosen_rewards - rejected_rewards),
    }


def _logratios(batch: PairedLogps, loss: str):
    chosen = batch.chosen - _need(batch, "ref_chosen", loss)
    rejected = batch.rejected - _need(batch, "ref_rejected", loss)
    return chosen, rejected


def _smoothed_sigmoid(logits, label_smoothing):
    return -(1.0 - label_smoothing) * log_sigmoid(logits) - label_smoothing * log_sigmoid(-logits)


@register_preference_loss("sigmoid")
def dpo_sigmoid(batch: PairedLogps, *, beta: float = 0.1, label_smoothing: float = 0.0):
    """DPO: -log sigmoid(beta * delta), delta = (c - ref_c) - (r - ref_r). label_smoothing = eps > 0 gives
    conservative DPO (cDPO): -(1 - eps) log sigmoid(beta delta) - eps log sigmoid(-beta delta)."""
    c, r = _logratios(batch, "sigmoid")
    loss = _smoothed_sigmoid(beta * (c - r), label_smoothing)
    return jnp.mean(loss), _reward_metrics(beta * c, beta * r)


@register_preference_loss("robust")
def dpo_robust(batch: PairedLogps, *, beta: float = 0.1, label_smoothing: float = 0.1):
    """Robust DPO (rDPO), unbiased under label-flip rate eps = label_smoothing in [0, 0.5):
    ((1 - eps) * -log sigmoid(beta delta) + eps * log sigmoid(-beta delta)) / (1 - 2 eps)."""
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"robust DPO needs label_smoothing in [0, 0.5); got {label_smoothing}")
    c, r = _logratios(batch, "robust")
    z = beta * (c - r)
    loss = (-(1.0 - label_smoothing) * log_sigmoid(z) + label_smoothing * log_sigmoid(-z)) / (
        1.0 - 2.0 * label_smoothing)
    return jnp.mean(loss), _reward_metrics(beta * c, beta * r)


@register_preference_loss("hinge")
def dpo_hinge(batch: PairedLogps, *, beta: float = 0.1):
    """SLiC-style hinge: relu(1 - beta * delta)."""
    c, r = _logratios(batch, "hinge")
    return jnp.mean(jax.nn.relu(1.0 - beta * (c - r))), _reward_metrics(beta * c, beta * r)


@register_preference_loss("ipo")
def ipo(batch: PairedLogps, *, beta: float = 0.1, length_normalize: bool = True):
    """IPO: (delta - 1 / (2 beta))^2. With length_normalize (TRL 1.16's form) each log-ratio is divided by its
    response length first: delta = (c - ref_c) / |y_c| - (r - ref_r) / |y_r|."""
    c, r = _logratios(batch, "ipo")
    if length_normalize:
        c_n = c / jnp.maximum(_need(batch, "chosen_lengths", "ipo"), 1.0)
        r_n = r / jnp.maximum(_need(batch, "rejected_lengths", "ipo"), 1.0)
    else:
        c_n, r_n = c, r
    loss = (c_n - r_n - 1.0 / (2.0 * beta)) ** 2
    return jnp.mean(loss), _reward_metrics(beta * c, beta * r)


def _avg_logps(batch: PairedLogps, loss: str):
    c = batch.chosen / jnp.maximum(_need(batch, "chosen_lengths", loss), 1.0)
    r = batch.rejected / jnp.maximum(_need(batch, "rejected_lengths", loss), 1.0)
    return c, r


@register_preference_loss("simpo")
def simpo(batch: PairedLogps, *, beta: float = 2.0, gamma: float = 0.5, label_smoothing: float = 0.0):
    """SimPO (reference-free): -log sigmoid(beta * (avg_c - avg_r) - gamma) on length-averaged log-probs,
    with optional label smoothing as TRL's CPOTrainer (loss_type="simpo", simpo_gamma=gamma)."""
    c, r = _avg_logps(batch, "simpo")
    loss = _smoothed_sigmoid(beta * (c - r) - gamma, label_smoothing)
    return jnp.mean(loss), _reward_metrics(beta * c, beta * r)


def _log1mexp(x: jax.Array) -> jax.Array:
    """log(1 - exp(x)) for x < 0, stable on both sides of -log 2."""
    return jnp.where(x > -jnp.log(2.0), jnp.log(-jnp.expm1(x)), jnp.log1p(-jnp.exp(x)))


@register_preference_loss("orpo")
def orpo(batch: PairedLogps, *, beta: float = 0.1, nll: jax.Array | None = None):
    """ORPO (reference-free): NLL(chosen) - beta * mean log sigmoid(log odds ratio).

    Log-probs are length-averaged; log odds(y) = avg - log(1 - exp(avg)). The NLL defaults to the paper's:
    the token mean over all chosen *response* tokens of the batch. TRL's ORPOTrainer also counts the prompt
    tokens; pass that scalar as `nll` to reproduce it.
    """
    c, r = _avg_logps(batch, "orpo")
    log_odds = (c - r) - (_log1mexp(c) - _log1mexp(r))
    ratio = log_sigmoid(log_odds)
    if nll is None:
        nll = -jnp.sum(batch.chosen) / jnp.maximum(jnp.sum(batch.chosen_lengths), 1.0)
    loss = nll - beta * jnp.mean(ratio)
    metrics = _reward_metrics(beta * c, beta * r)
    metrics.update(nll_loss=jax.lax.stop_gradient(nll), log_odds_ratio=jax.lax.stop_gradient(jnp.mean(ratio)),
                   log_odds_chosen=jax.lax.stop_gradient(jnp.mean(log_odds)))
    return loss, metrics


@register_preference_loss("kto")
def kto(batch: UnpairedLogps, *, beta: float = 0.1, desirable_weight: float = 1.0,
        undesirable_weight: float = 1.0):
    """KTO (unpaired): with r = logp - ref_logp and z0 = max(0, mean(kl_logps - ref_kl_logps)) (no gradient),
    desirable: w_d (1 - sigmoid(beta (r - z0))); undesirable: w_u (1 - sigmoid(beta (z0 - r))); mean over B.
    z0 is this batch's estimate; TRL averages it over data-parallel ranks (pass gathered kl arrays)."""
    if not isinstance(batch, UnpairedLogps):
        raise TypeError(f"preference loss 'kto' needs an UnpairedLogps batch; got {type(batch).__name__}")
    z0 = jax.lax.stop_gradient(jnp.maximum(jnp.mean(batch.kl_logps - batch.ref_kl_logps), 0.0))
    r = batch.logps - batch.ref_logps
    desirable = batch.labels.astype(bool)
    loss = jnp.where(desirable, desirable_weight * (1.0 - jax.nn.sigmoid(beta * (r - z0))),
                     undesirable_weight * (1.0 - jax.nn.sigmoid(beta * (z0 - r))))
    rewards = jax.lax.stop_gradient(beta * r)
    n_d = jnp.sum(desirable)
    n_u = jnp.sum(~desirable)
    chosen = jnp.sum(jnp.where(desirable, rewards, 0.0)) / jnp.maximum(n_d, 1)
    rejected = jnp.sum(jnp.where(desirable, 0.0, rewards)) / jnp.maximum(n_u, 1)
    metrics = {"kl": z0, "rewards_chosen": chosen, "rewards_rejected": rejected,
               "reward_margin": chosen - rejected}
    return jnp.mean(loss), metrics


def bradley_terry_loss(chosen_scores: jax.Array, rejected_scores: jax.Array, margin: jax.Array | None = None,
                       center_coef: float | None = None):
    """Reward-model loss: mean -log sigmoid(s_c - s_r - margin) (+ center_coef * mean((s_c + s_r)^2)).

    chosen_scores, rejected_scores: (B,) scalar rewards from the reward head; margin (B,) optional, as TRL's
    RewardTrainer. Returns (loss, metrics) with pairwise accuracy and the mean margin.
    """
    diff = chosen_scores - rejected_scores
    loss = -jnp.mean(log_sigmoid(diff if margin is None else diff - margin))
    if center_coef is not None:
        loss = loss + center_coef * jnp.mean((chosen_scores + rejected_scores) ** 2)
    d = jax.lax.stop_gradient(diff)
    metrics = {"accuracy": jnp.mean((d > 0).astype(jnp.float32)), "margin": jnp.mean(d),
               "rewards_chosen": jnp.mean(jax.lax.stop_gradient(chosen_scores)),
               "rewards_rejected": jnp.mean(jax.lax.stop_gradient(rejected_scores))}
    return loss, metrics
