"""Compile-only scale rehearsal: AOT-compile a stage's real programs for a TPU topology (or local devices) from
abstract, sharded state and read the compiler's memory, FLOPs and collectives (`python -m rlpt.plan`)."""
from rlpt.plan.analyze import assert_sharded, collectives, replicated_buffers, unsplit_buffers
from rlpt.plan.chips import CHIPS, Chip, Target, TargetError, parse_target, target_devices, valid_targets
from rlpt.plan.rehearse import rehearse

__all__ = ["CHIPS", "Chip", "Target", "TargetError", "assert_sharded", "collectives", "parse_target", "rehearse",
           "replicated_buffers", "target_devices", "unsplit_buffers", "valid_targets"]
