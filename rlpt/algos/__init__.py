"""rlpt.algos: advantages, policy losses, KL estimators, loss aggregation, DAPO shaping, preference losses.

Pure JAX functions chosen by name from registries (`ADVANTAGES`, `POLICY_LOSSES`, `KL_ESTIMATORS`,
`AGGREGATIONS`, `PREFERENCE_LOSSES`); see docs/algorithms.md for formulas and framework semantics.
"""
from rlpt.algos.advantages import (
    ADVANTAGES,
    discounted_returns,
    gae_advantages,
    get_advantage,
    group_normalized_advantages,
    group_stats,
    masked_whiten,
    outcome_token_rewards,
    register_advantage,
    rloo_advantages,
    sequence_scores,
)
from rlpt.algos.aggregation import (
    AGGREGATIONS,
    aggregate,
    aggregate_with_denominator,
    get_aggregation,
    register_aggregation,
    step_denominator,
)
from rlpt.algos.correction import rollout_correction
from rlpt.algos.dapo import dynamic_sampling_keep, kept_row_indices, overlong_filter, soft_overlong_penalty
from rlpt.algos.kl import KL_ESTIMATORS, entropy_from_logits, get_kl, kl_in_reward, register_kl
from rlpt.algos.policy_losses import POLICY_LOSSES, get_policy_loss, masked_mean, register_policy_loss
from rlpt.algos.preference import (
    PREFERENCE_LOSSES,
    REFERENCE_FREE,
    PairedLogps,
    UnpairedLogps,
    bradley_terry_loss,
    get_preference_loss,
    register_preference_loss,
)
from rlpt.algos.registry import Registry
from rlpt.algos.value import value_loss

__all__ = [
    "ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "POLICY_LOSSES", "PREFERENCE_LOSSES", "REFERENCE_FREE",
    "PairedLogps", "Registry", "UnpairedLogps", "aggregate", "aggregate_with_denominator",
    "bradley_terry_loss",
    "discounted_returns", "dynamic_sampling_keep", "entropy_from_logits", "gae_advantages", "get_advantage",
    "get_aggregation", "get_kl", "get_policy_loss", "get_preference_loss", "group_normalized_advantages",
    "group_stats", "kept_row_indices", "kl_in_reward", "masked_mean", "masked_whiten",
    "outcome_token_rewards",
    "overlong_filter", "register_advantage", "register_aggregation", "register_kl", "register_policy_loss",
    "register_preference_loss", "rloo_advantages", "rollout_correction", "sequence_scores",
    "soft_overlong_penalty", "step_denominator", "value_loss",
]
