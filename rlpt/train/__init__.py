"""rlpt.train."""
