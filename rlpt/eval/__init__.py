"""rlpt.eval."""
