"""rlpt.rollout."""
