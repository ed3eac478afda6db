"""Verifiers, reward components and reward mixtures."""

from rlpt.rewards import mathcheck  # noqa: F401  (registers the 'symbolic' verifier)
from rlpt.rewards.components import COMPONENTS, register_component
from rlpt.rewards.mixture import RewardMixture
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import VERIFIERS, get_verifier, register_verifier

__all__ = [
    "COMPONENTS",
    "RewardMixture",
    "Verdict",
    "VERIFIERS",
    "get_verifier",
    "register_component",
    "register_verifier",
]
