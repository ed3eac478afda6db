"""Mesh, logical-axis sharding rules and multi-host initialisation."""
from rlpt.parallel.mesh import AXES, make_mesh, maybe_initialize_distributed, mesh_shape
from rlpt.parallel.rules import (
    DEFAULT_RULES,
    axis_rules,
    constrain,
    current_mesh,
    logical_spec,
    named_sharding,
)

__all__ = ["AXES", "DEFAULT_RULES", "axis_rules", "constrain", "current_mesh", "logical_spec", "make_mesh",
           "maybe_initialize_distributed", "mesh_shape", "named_sharding"]
