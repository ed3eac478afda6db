"""Device mesh from config (axes data, fsdp, tensor, seq); multi-host initialisation is rlpt.parallel.distributed."""
import logging

import jax
import numpy as np
from jax.sharding import AxisType

AXES = ("data", "fsdp", "tensor", "seq")
log = logging.getLogger(__name__)


def mesh_shape(cfg, num_devices: int) -> dict[str, int]:
    sizes = {a: getattr(cfg, a) for a in AXES}
    free = [a for a, s in sizes.items() if s == -1]
    if len(free) > 1:
        raise ValueError(f"mesh: at most one axis may be -1, got {free}")
    fixed = int(np.prod([s for s in sizes.values() if s != -1]))
    if free:
        if num_devices % fixed:
            raise ValueError(f"mesh: {num_devices} devices are not divisible by the fixed axes {sizes}")
        sizes[free[0]] = num_devices // fixed
    if int(np.prod(list(sizes.values()))) != num_devices:
        raise ValueError(f"mesh: axis sizes {sizes} do not multiply to the {num_devices} devices")
    return sizes


def make_mesh(cfg, devices=None) -> jax.sharding.Mesh:
    """A mesh over all devices (or `devices`) with the configured axis types."""
    devices = jax.devices() if devices is None else devices
    sizes = mesh_shape(cfg, len(devices))
    if cfg.axis_type not in ("auto", "explicit"):
        raise ValueError(f"mesh.axis_type={cfg.axis_type!r}; expected 'auto' or 'explicit'")
    kind = AxisType.Auto if cfg.axis_type == "auto" else AxisType.Explicit
    mesh = jax.make_mesh(tuple(sizes.values()), AXES, axis_types=(kind,) * len(AXES), devices=devices)
    inner = sizes["tensor"] * sizes["seq"]
    spans = [len({d.process_index for d in group}) for group in mesh.devices.reshape(-1, inner)]
    if max(spans) > 1:  # process-major devices: data/fsdp cross hosts, tensor/seq should not
        log.warning("mesh: the tensor x seq axes (%d devices) span %d processes; their per-layer collectives will "
                    "cross hosts. Keep mesh.tensor x mesh.seq within one host's %d devices.", inner, max(spans),
                    jax.local_device_count())
    return mesh
