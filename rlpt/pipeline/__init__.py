"""rlpt.pipeline."""
