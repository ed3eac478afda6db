"""Device mesh from config (axes data, fsdp, tensor, seq) and multi-host initialisation."""
import logging
import os

import jax
import numpy as np
from jax.sharding import AxisType

log = logging.getLogger(__name__)
AXES = ("data", "fsdp", "tensor", "seq")


def maybe_initialize_distributed(cfg) -> bool:
    """jax.distributed.initialize when the config or the environment (JAX_COORDINATOR_ADDRESS) asks."""
    env = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if not (cfg.distributed or env):
        return False
    if jax.distributed.is_initialized():  # a second stage in the same run (cold start, then RL)
        return True
    kwargs = {}
    if cfg.coordinator_address or env:
        kwargs["coordinator_address"] = cfg.coordinator_address or env
    if cfg.num_processes is not None:
        kwargs["num_processes"] = cfg.num_processes
    elif os.environ.get("JAX_NUM_PROCESSES"):
        kwargs["num_processes"] = int(os.environ["JAX_NUM_PROCESSES"])
    if cfg.process_id is not None:
        kwargs["process_id"] = cfg.process_id
    elif os.environ.get("JAX_PROCESS_ID"):
        kwargs["process_id"] = int(os.environ["JAX_PROCESS_ID"])
    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process collectives on CPU
    jax.distributed.initialize(**kwargs)
    log.info("jax.distributed initialised: process %d of %d", jax.process_index(), jax.process_count())
    return True


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
    return jax.make_mesh(tuple(sizes.values()), AXES, axis_types=(kind,) * len(AXES), devices=devices)
