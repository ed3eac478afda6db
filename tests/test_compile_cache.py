"""JAX's persistent compilation cache as the CLI turns it on (runtime.compilation_cache): a second identical run
reads every program the first one compiled (counted by JAX's cache events, not timed)."""
import json
import os
import subprocess
import sys

from rlpt.config.schema import compose

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# What a stage does first (rlpt.train.stages.run_stage -> rlpt.runtime.setup), then a jitted step, in a fresh process.
PROGRAM = """
import json, sys
import jax, jax.numpy as jnp
from rlpt.config.schema import RuntimeConfig
from rlpt.runtime import compile_stats, setup
setup(RuntimeConfig(compilation_cache=sys.argv[1]))
step = jax.jit(lambda w, x: jnp.tanh(x @ w) @ w.T)
out = step(jnp.ones((32, 32)), jnp.arange(64.0).reshape(2, 32))
print(json.dumps(compile_stats() | {"out": float(out.sum())}))
"""


def _process(cache):
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(cache)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_reads_every_program_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _process(cache)
    second = _process(cache)
    assert first["compile_cache_misses"] > 0 and first["compile_cache_hits"] == 0
    assert os.listdir(cache)
    assert second["compile_cache_misses"] == 0
    assert second["compile_cache_hits"] == first["compile_cache_misses"]
    assert second["out"] == first["out"]  # the cached executable computes the same
    # a whole CLI run: scripts/bench/compile_cache.py (docs/benchmarks.md)


def test_default_is_the_user_cache_unless_the_environment_says_otherwise(monkeypatch, tmp_path):
    import jax

    from rlpt.runtime import DEFAULT_CACHE, setup

    assert compose(["experiment=sft_tiny"]).runtime.compilation_cache == "auto"
    monkeypatch.setenv("RLPT_COMPILATION_CACHE", str(tmp_path / "c"))
    before = jax.config.jax_compilation_cache_dir
    try:
        assert setup(compose(["experiment=sft_tiny"]).runtime) == str(tmp_path / "c")
        monkeypatch.delenv("RLPT_COMPILATION_CACHE")
        assert setup(compose(["experiment=sft_tiny"]).runtime) == os.path.expanduser(DEFAULT_CACHE)
        assert setup(compose(["experiment=sft_tiny", "runtime.compilation_cache="]).runtime) is None
        assert jax.config.jax_compilation_cache_dir is None
    finally:
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", before)
        compilation_cache.reset_cache()
