"""The named ops the model is written in, and the backend that implements them (`model.ops`).

`rlpt.models.transformer` is the architecture in plain JAX; every numeric primitive it calls (`dense`, `rms_norm`,
`add_bias`, `self_attention` / `attention` / `cached_attention`, `swiglu`, the KV cache's `cache_write` /
`cache_load`) comes from one backend module chosen once per model:

- `reference` (rlpt.models.ops.reference): plain jnp, differentiated by autodiff. GPU and TPU compile this.
- `xla_cpu` (rlpt.models.ops.xla_cpu): the same math with the rewrites measured faster on XLA:CPU (custom VJPs,
  layout barriers, causal block skipping, a uint16 KV cache) and, for sampling, the feature-major decode step
  (rlpt.models.ops.xla_cpu_decode).

`model.ops`: "auto" (xla_cpu when compiling for CPU, reference elsewhere: `platform.compiling_for` makes a
compile-only rehearsal for TPU choose as a TPU would), "reference" or "xla_cpu". Both backends compute the same
values and gradients (tests/models/test_ops_backends.py).
"""
from types import ModuleType

from rlpt.models.config import OPS_BACKENDS
from rlpt.models.ops import reference, xla_cpu
from rlpt.models.ops.platform import compiling_for, on_cpu, target_platform

_MODULES = {"reference": reference, "xla_cpu": xla_cpu}


def resolved_ops(cfg) -> str:
    """cfg.ops with "auto" resolved for the platform being compiled for: "xla_cpu" on CPU, else "reference"."""
    if cfg.ops == "auto":
        return "xla_cpu" if on_cpu() else "reference"
    return cfg.ops


def ops_for(cfg) -> ModuleType:
    """The ops module `cfg`'s model calls (`resolved_ops`)."""
    return _MODULES[resolved_ops(cfg)]


__all__ = ["OPS_BACKENDS", "compiling_for", "on_cpu", "ops_for", "reference", "resolved_ops", "target_platform",
           "xla_cpu"]
