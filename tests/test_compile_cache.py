"""JAX's persistent compilation cache as the CLI turns it on (runtime.compilation_cache): a second identical run
reads every program the first one compiled (counted by JAX's cache events, not timed)."""
import json
import os
import subprocess
import sys

from rlpt.config.schema import compose

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(tmp_path, name, cache):
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "rlpt.train", "experiment=sft_tiny", "train.steps=2",
                           "train.eval_every=0", f"train.out_dir={out}", f"runtime.compilation_cache={cache}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def test_second_run_reads_every_program_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _train(tmp_path, "a", cache)
    second = _train(tmp_path, "b", cache)
    assert first["compile_cache_misses"] > 0 and first["compile_cache_hits"] == 0
    assert os.listdir(cache)
    assert second["compile_cache_misses"] == 0
    assert second["compile_cache_hits"] == first["compile_cache_misses"]
    assert second["final_loss"] == first["final_loss"]  # cached executables compute the same run


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
