"""Test configuration: 8 fake CPU devices, set before JAX is imported anywhere; the worker-process count.

XLA's backend optimisation level 0 cuts CPU compile time about 3x; tests check numbers, not speed.
The default run is split over pytest-xdist workers (`-n auto --dist worksteal` in pyproject.toml): most of a
test's time is single-threaded tracing and compiling, so two workers on two cores took the suite from 18 to
11 minutes. `pytest -n 0` runs in one process.
"""
import os

_FLAGS = ("--xla_force_host_platform_device_count=8", "--xla_backend_optimization_level=0")
# xdist workers inherit the controller's environment: add each flag once.
_xla = os.environ.get("XLA_FLAGS", "").split()
os.environ["XLA_FLAGS"] = " ".join(_xla + [f for f in _FLAGS if f not in _xla])
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No persistent compilation cache in tests (xdist workers would share one folder); tests/test_compile_cache.py
# turns it on in its own processes.
os.environ["RLPT_COMPILATION_CACHE"] = ""

# Each worker holds ~3-5 GB at its peak (JAX with 8 fake devices, torch, transformers).
_GB_PER_WORKER = 5
_MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per usable core, at most 4 and at most one per 5 GB of memory."""
    cores = len(os.sched_getaffinity(0))
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(cores, _MAX_WORKERS, int(memory_gb // _GB_PER_WORKER)))
