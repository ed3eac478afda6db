"""Compose-time checks of an RL objective's options (`rl.algo`): names, their keyword options, combinations.

Each registered function's keyword-only parameters are its options and their defaults the one source of them;
`rl.algo.<piece>_kwargs` overrides some. `check_algo_options` refuses, before any work, an unknown name, an
option the chosen function does not take (or a required one missing), a value of the wrong type (each piece's
options are a typed dataclass, `Registry.options_class`), and settings that would be silently ignored, naming the
keys."""
from rlpt.algos.advantages import ADVANTAGES
from rlpt.algos.aggregation import AGGREGATIONS
from rlpt.algos.kl import KL_ESTIMATORS
from rlpt.algos.policy_losses import POLICY_LOSSES


def check_algo_options(algo, key: str = "rl.algo") -> None:
    """Raise ValueError naming the key(s) of the first bad option of an AlgoConfig-like `algo`."""
    POLICY_LOSSES.options(algo.policy_loss, algo.policy_loss_kwargs, f"{key}.policy_loss")
    ADVANTAGES.options(algo.advantage, algo.advantage_kwargs, f"{key}.advantage", supplied=("num_groups", "values"))
    AGGREGATIONS.options(algo.aggregation, algo.aggregation_kwargs, f"{key}.aggregation")
    if algo.kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"{key}.kl_estimator={algo.kl_estimator!r}: unknown; known: {sorted(KL_ESTIMATORS)}")
    if algo.correction_level != "none" and algo.old_logp == "rollout":
        raise ValueError(f"{key}.correction_level={algo.correction_level!r} reweights trainer / rollout "
                         f"log-probs, but {key}.old_logp='rollout' makes them the same array (every weight 1): "
                         f"set {key}.old_logp=recompute")
