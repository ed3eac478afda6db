"""The data flywheel: failure cases of a run -> new training tasks and verifier regression cases."""
from rlpt.flywheel.build import build, check_regressions, read_failures

__all__ = ["build", "check_regressions", "read_failures"]
