"""Launchers: start one rlpt program as several JAX processes (`python -m rlpt.launch local --nproc N -- CMD`)."""
from rlpt.launch.local import launch_local

__all__ = ["launch_local"]
