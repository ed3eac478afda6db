"""Mesh, logical-axis sharding rules and multi-host initialisation."""
from rlpt.parallel.distributed import (
    DistributedError,
    HostGlobal,
    HostLocal,
    check_same_config,
    console_note,
    gather_objects,
    gather_rows,
    host_rows,
    local_replica,
    log_to_file,
    maybe_initialize_distributed,
    peer_failure,
    place,
    split_devices,
    to_host,
)
from rlpt.parallel.mesh import AXES, make_mesh, mesh_shape
from rlpt.parallel.rules import (
    DEFAULT_RULES,
    axis_rules,
    constrain,
    current_mesh,
    logical_spec,
    named_sharding,
)

__all__ = ["AXES", "DEFAULT_RULES", "DistributedError", "HostGlobal", "HostLocal", "axis_rules", "check_same_config",
           "console_note", "constrain", "current_mesh", "gather_objects", "gather_rows", "host_rows", "local_replica",
           "log_to_file", "logical_spec", "make_mesh", "maybe_initialize_distributed", "mesh_shape", "named_sharding",
           "peer_failure", "place", "split_devices", "to_host"]
