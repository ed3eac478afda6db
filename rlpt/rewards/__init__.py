"""Verifiers, judges (soft verifiers) and their calibration, reward components and reward mixtures."""

from rlpt.rewards import mathcheck  # noqa: F401  (registers the 'symbolic' verifier)
from rlpt.rewards.components import COMPONENTS, get_component, register_component
from rlpt.rewards.generative import GenerativeJudge, parse_judgement
from rlpt.rewards.judges import JUDGES, Judge, JudgeScores, RewardModelJudge, Scorer, get_judge, register_judge
from rlpt.rewards.mixture import RewardMixture
from rlpt.rewards.recalibration import CalibratedJudge, CalibrationConfig, LabelledSet
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import VERIFIERS, get_verifier, register_verifier

__all__ = [
    "COMPONENTS",
    "CalibratedJudge",
    "CalibrationConfig",
    "GenerativeJudge",
    "JUDGES",
    "Judge",
    "JudgeScores",
    "LabelledSet",
    "RewardModelJudge",
    "Scorer",
    "get_component",
    "get_judge",
    "parse_judgement",
    "register_judge",
    "RewardMixture",
    "Verdict",
    "VERIFIERS",
    "get_verifier",
    "register_component",
    "register_verifier",
]
