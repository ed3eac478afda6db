"""Test configuration: 8 fake CPU devices, set before JAX is imported anywhere.

XLA's backend optimisation level 0 cuts CPU compile time about 3x; tests check numbers, not speed.
"""
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
