"""Accelerator chips (HBM, peak bf16 FLOP/s, HBM bandwidth, with sources) and `target=` names -> devices."""
import dataclasses
import logging
import math
import os
import re

log = logging.getLogger(__name__)

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator chip: per-chip HBM bytes, dense bf16 peak FLOP/s, HBM bytes/s, where the numbers are from."""

    name: str
    hbm_bytes: int
    peak_flops: float
    hbm_bw: float
    source: str


# Dense (no sparsity) bf16 matmul peaks and HBM per chip, as the vendors publish them.
CHIPS = {
    "v4": Chip("TPU v4", 32 * GiB, 275e12, 1228e9, "https://cloud.google.com/tpu/docs/v4 (32 GiB HBM2, 275 TFLOP/s "
               "bf16, 1,228 GB/s)"),
    "v5e": Chip("TPU v5e", 16 * GiB, 197e12, 819e9, "https://cloud.google.com/tpu/docs/v5e (16 GiB HBM2, 197 TFLOP/s "
                "bf16, 819 GB/s)"),
    "v5p": Chip("TPU v5p", 95 * GiB, 459e12, 2765e9, "https://cloud.google.com/tpu/docs/v5p (95 GiB HBM2e, 459 "
                "TFLOP/s bf16, 2,765 GB/s)"),
    "v6e": Chip("TPU v6e (Trillium)", 32 * GiB, 918e12, 1640e9, "https://cloud.google.com/tpu/docs/v6e (32 GiB HBM, "
                "918 TFLOP/s bf16, 1,640 GB/s)"),
    "h100": Chip("NVIDIA H100 SXM", 80 * 10**9, 989.4e12, 3.35e12, "https://www.nvidia.com/en-us/data-center/h100/ "
                 "(80 GB HBM3, 989 TFLOP/s dense bf16, 3.35 TB/s)"),
    "h200": Chip("NVIDIA H200 SXM", 141 * 10**9, 989.4e12, 4.8e12, "https://www.nvidia.com/en-us/data-center/h200/ "
                 "(141 GB HBM3e, 989 TFLOP/s dense bf16, 4.8 TB/s)"),
}
# CPU targets have no fixed capacity: a nominal 16 GiB per fake device, 1 TFLOP/s, 50 GB/s (orders of magnitude).
CPU_CHIP = Chip("CPU (fake devices)", 16 * GiB, 1e12, 50e9, "nominal; fake CPU devices share the host")

# v4 and v5p slice names count TensorCores (2 per chip): v5p-64 is 32 chips; v5e and v6e names count chips.
CORES_IN_NAME = {"v4": 2, "v5p": 2, "v5e": 1, "v6e": 1}
TOPO_DIMS = {"v4": 3, "v5p": 3, "v5e": 2, "v6e": 2}
SIZES = {"v4": (8, 16, 32, 64, 128, 256, 512, 1024), "v5p": (8, 16, 32, 64, 128, 256, 512, 1024),
         "v5e": (1, 4, 8, 16, 32, 64, 128, 256), "v6e": (1, 4, 8, 16, 32, 64, 128, 256)}


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed `target=`: kind tpu | cpu | gpu, the chip, the topology name libtpu takes, chips in the slice."""

    spec: str
    kind: str
    chip: Chip
    chips: int
    topology: str | None = None  # e.g. "v5e:2x2"
    gen: str | None = None


def valid_targets() -> str:
    tpu = ", ".join(f"tpu:{g}-{{{','.join(map(str, s))}}}" for g, s in SIZES.items())
    return (f"{tpu}; or tpu:<gen>:<topology> (e.g. tpu:v5e:2x4, tpu:v5p:2x4x4); cpu:<devices> (e.g. cpu:8); "
            f"gpu:<h100|h200>-<devices> (needs that many local GPUs)")


class TargetError(ValueError):
    """A target name that is not one of `valid_targets()`."""


def _grid(chips: int, dims: int) -> tuple[int, ...]:
    """The slice shape of a power-of-two chip count, as Cloud TPU names it: 2D (v5e/v6e) 2x2, 2x4, 4x4, ...; 3D
    (v4/v5p) 2x2x1, 2x2x2, 2x2x4, 2x4x4, ... (a dimension of 1 last: v5p-8 is one host of 2x2x1 chips; 1x2x2 would
    be two hosts of 1x2, on which libtpu's all-reduce emitter aborts for some models)."""
    shape = [1] * dims
    i = 0
    while math.prod(shape) < chips:
        shape[i % dims] *= 2
        i += 1
    if dims == 3:
        return tuple(sorted(d for d in shape if d > 1)) + tuple(d for d in shape if d == 1)
    return tuple(sorted(shape))


def parse_target(spec: str) -> Target:
    """`tpu:v5e-4`, `tpu:v5p-64`, `tpu:v5e:2x4`, `cpu:8`, `gpu:h100-8` -> Target; anything else raises TargetError."""
    bad = TargetError(f"target={spec!r} is not a known target; valid: {valid_targets()}")
    m = re.fullmatch(r"cpu:(\d+)", spec)
    if m:
        if int(m.group(1)) < 1:
            raise bad
        return Target(spec, "cpu", CPU_CHIP, int(m.group(1)))
    m = re.fullmatch(r"gpu:(h100|h200)-(\d+)", spec)
    if m:
        return Target(spec, "gpu", CHIPS[m.group(1)], int(m.group(2)), gen=m.group(1))
    m = re.fullmatch(r"tpu:(v4|v5e|v5p|v6e):(\d+(?:x\d+){1,2})", spec)
    if m:
        gen, topo = m.groups()
        dims = tuple(int(d) for d in topo.split("x"))
        if len(dims) != TOPO_DIMS[gen] or any(d < 1 for d in dims):
            raise bad
        return Target(spec, "tpu", CHIPS[gen], math.prod(dims), f"{gen}:{topo}", gen)
    m = re.fullmatch(r"tpu:(v4|v5e|v5p|v6e)-(\d+)", spec)
    if m and int(m.group(2)) in SIZES[m.group(1)]:
        gen, n = m.group(1), int(m.group(2))
        chips = n // CORES_IN_NAME[gen]
        topo = "x".join(map(str, _grid(chips, TOPO_DIMS[gen])))
        return Target(spec, "tpu", CHIPS[gen], chips, f"{gen}:{topo}", gen)
    raise bad


def request_cpu_devices(argv) -> None:
    """A `target=cpu:N` among the command-line overrides needs N host devices, which XLA reads from its flags when
    JAX's CPU backend starts: add the flag (and JAX_PLATFORMS=cpu) before anything asks JAX for a device."""
    for arg in argv:
        m = re.fullmatch(r"target=cpu:(\d+)", arg)
        if m:
            flag = f"--xla_force_host_platform_device_count={m.group(1)}"
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
            os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _drop_cpu_flags_for_libtpu() -> None:
    """libtpu parses XLA_FLAGS itself when it first compiles and aborts the process on a flag its XLA does not know,
    such as a newer XLA:CPU flag (`--xla_cpu_use_fusion_emitters`). A TPU compile never reads `--xla_cpu_*` flags,
    so they leave XLA_FLAGS here (a CPU backend that has started already read them and keeps them)."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    kept = [f for f in flags if not f.startswith("--xla_cpu_")]
    if len(kept) < len(flags):
        log.info("XLA_FLAGS: %s left out of libtpu's flags", " ".join(f for f in flags if f not in kept))
        os.environ["XLA_FLAGS"] = " ".join(kept)


def target_devices(target: Target) -> list:
    """The devices a mesh for this target spans: TPU devices from libtpu's topology description (nothing runs,
    nothing is allocated), or the local CPU / GPU devices (cpu:N needs N devices, e.g. XLA_FLAGS
    --xla_force_host_platform_device_count=N set before JAX starts, as `python -m rlpt.plan` does)."""
    import jax

    if target.kind == "tpu":
        # Compile-only: no chip is opened, so several processes (test workers, a rehearsal beside another) may each
        # load libtpu; without this the second one fails on libtpu's lockfile.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        _drop_cpu_flags_for_libtpu()
        try:
            from jax.experimental import topologies
            dims = [int(d) for d in target.topology.split(":")[1].split("x")] + [1]
            hosts = tuple(min(2, d) for d in dims[:2]) + (1,)
            desc = topologies.get_topology_desc(platform="tpu", topology_name=target.topology,
                                                chip_config_name="default", chips_per_host_bounds=hosts,
                                                num_slices=1)
        except Exception as e:  # libtpu missing or a topology it rejects: say which, and how to get it
            raise TargetError(f"target={target.spec!r}: no TPU topology {target.topology!r} from libtpu ({e}); "
                              "AOT for TPU needs the libtpu wheel (pip install 'rlpt[plan]')") from e
        return list(desc.devices)
    try:
        devices = jax.devices(target.kind)
    except RuntimeError as e:
        raise TargetError(f"target={target.spec!r}: no {target.kind} backend in this process ({e})") from e
    if len(devices) < target.chips:
        raise TargetError(f"target={target.spec!r} needs {target.chips} {target.kind} devices; this process has "
                          f"{len(devices)}")
    return devices[:target.chips]
