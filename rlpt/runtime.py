"""Process-level settings: JAX's persistent compilation cache, per-jit XLA:CPU compiler options, glibc malloc tuning.

Two facts measured on the project's CPU machines (docs/benchmarks.md, "What the CPU runtime settings buy"):

- XLA:CPU gets its temporary buffers from malloc on its worker threads. With glibc's defaults those threads use
  their own arenas, where every block above ~32 MB is a fresh mmap, so each train step page-faults and zeroes
  ~2 GB (550k minor faults per step of the 10M benchmark model). One arena that keeps freed memory
  (`MALLOC_ARENA_MAX=1`, high mmap and trim thresholds) lets the next step reuse the pages: 4 faults in 1,000
  remain and the step is ~20% faster. glibc reads these variables only at start-up, so entry points re-exec
  themselves once with them set (`tune_malloc`); set `RLPT_MALLOC_TUNING=0` to opt out.
- The YNNPACK dot library speeds up the large float32 matmuls of a train step (~1.3x on the whole step) but
  slows the small per-token matmuls of decoding and bf16 matmuls, so it is a per-jit compiler option
  (`compiler_options("train")`, float32 compute only), not a process flag.
"""
import os
import sys

MALLOC_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 40), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
_OPT_OUT = "RLPT_MALLOC_TUNING"

# XLA debug options per kind of computation on the CPU backend (values as the DebugOptions proto spells them).
_CPU_OPTIONS = {
    "train": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"},
    "decode": {},
}


def compiler_options(kind: str, compute_dtype: str = "float32", platform: str | None = None) -> dict | None:
    """`jax.jit(..., compiler_options=...)` for a computation of this kind ("train" or "decode") compiled for
    `platform` ("cpu", "gpu", "tpu"; None: the default backend; callers that trace for a rehearsal's target pass
    `rlpt.models.ops.target_platform()`); None where nothing is tuned (every non-CPU platform).

    The YNNPACK dot library pays for float32 matmuls only: on a CPU with bf16 dot instructions (AVX512-BF16)
    XLA's default bf16 matmul is ~1.9x YNNPACK's (254 vs 135 GFLOP/s at 2048^3, train step 1.13x), so a
    bfloat16/float16 computation keeps XLA's defaults."""
    import jax

    if kind not in _CPU_OPTIONS:
        raise ValueError(f"compiler_options: unknown kind {kind!r}; expected one of {sorted(_CPU_OPTIONS)}")
    if (platform or jax.default_backend()) != "cpu" or compute_dtype != "float32":
        return None
    return dict(_CPU_OPTIONS[kind]) or None


def malloc_tuned() -> bool:
    """True when this process started with MALLOC_ENV in its environment."""
    return all(os.environ.get(k) == v for k, v in MALLOC_ENV.items())


def tune_malloc() -> None:
    """Re-exec the current command once with MALLOC_ENV set (Linux/glibc only; a no-op when already set,
    when RLPT_MALLOC_TUNING=0, or where the original command line is unknown). Call it first thing in an
    entry point, before any work: the process image is replaced."""
    if os.environ.get(_OPT_OUT, "1") == "0" or malloc_tuned() or not sys.platform.startswith("linux"):
        return
    import platform

    if platform.libc_ver()[0] != "glibc" or not getattr(sys, "orig_argv", None):
        return
    env = dict(os.environ, **MALLOC_ENV, **{_OPT_OUT: "0"})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


DEFAULT_CACHE = "~/.cache/rlpt/jax"
# JAX monitoring events counted since the last setup(): compile time (an XLA compilation or a persistent-cache
# read; seconds) and the persistent cache's hits and misses
_EVENTS = {"/jax/core/compile/backend_compile_duration": "compile_s",
           "/jax/compilation_cache/cache_hits": "compile_cache_hits",
           "/jax/compilation_cache/cache_misses": "compile_cache_misses"}
_stats = dict.fromkeys(_EVENTS.values(), 0)
_listening = []


def _on_duration(event: str, seconds: float, **_) -> None:
    if event in _EVENTS:
        _stats[_EVENTS[event]] += seconds


def _on_event(event: str, **_) -> None:
    if event in _EVENTS:
        _stats[_EVENTS[event]] += 1


def compile_stats() -> dict:
    """compile_s and the persistent cache's hits and misses since the last setup() (run summaries carry them)."""
    return _stats | {"compile_s": round(_stats["compile_s"], 2)}


def setup(rcfg) -> str | None:
    """Apply a RuntimeConfig before a run: point JAX's persistent compilation cache at `rcfg.compilation_cache`
    ("" turns it off; auto: $RLPT_COMPILATION_CACHE, else DEFAULT_CACHE; ~ expanded) and restart the compile-time
    counter. Returns the cache folder in use (None: off). Safe to call again (a notebook's next run): a changed
    folder resets JAX's cache object."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _listening.append(True)
    _stats.update(dict.fromkeys(_stats, 0))
    folder = rcfg.compilation_cache
    if folder == "auto":
        folder = os.environ.get("RLPT_COMPILATION_CACHE", DEFAULT_CACHE)
    folder = os.path.abspath(os.path.expanduser(folder)) if folder else None
    if folder != jax.config.jax_compilation_cache_dir:
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", folder)
        compilation_cache.reset_cache()  # the cache object reads the folder once, when it is first used
    jax.config.update("jax_persistent_cache_min_compile_time_secs", rcfg.cache_min_compile_s)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
