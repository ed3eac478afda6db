"""rlpt.observe."""
