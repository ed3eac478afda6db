"""Held-out evaluation of a policy on generated tasks: `rlpt.tasks.heldout`, re-exported here (its earlier home)."""
from rlpt.tasks.heldout import evaluate, family_means, heldout_tasks

__all__ = ["evaluate", "family_means", "heldout_tasks"]
