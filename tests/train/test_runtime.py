"""rlpt.runtime: per-jit XLA options and the one-time malloc re-exec of entry points."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt import runtime


def test_train_options_compile_and_keep_values():
    opts = runtime.compiler_options("train")
    assert opts == {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}  # CI runs on CPU
    assert runtime.compiler_options("decode") is None
    assert runtime.compiler_options("train", "bfloat16") is None  # XLA's own bf16 dot is the faster one
    a = jax.random.normal(jax.random.key(0), (64, 48))
    f = jax.jit(lambda x: x @ x.T, compiler_options=opts)
    np.testing.assert_allclose(f(a), a @ a.T, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="unknown kind 'serve'"):
        runtime.compiler_options("serve")


def test_options_follow_the_platform_compiled_for():
    """A TPU rehearsal on this CPU process traces under compiling_for("tpu"): the train step gets no XLA:CPU option."""
    from rlpt.models.ops import compiling_for, target_platform

    assert runtime.compiler_options("train", platform="tpu") is None
    assert runtime.compiler_options("train", platform="gpu") is None
    with compiling_for("tpu"):
        assert runtime.compiler_options("train", platform=target_platform()) is None
    assert runtime.compiler_options("train", platform=target_platform()) is not None  # CI runs on CPU


def _probe(env):
    code = ("from rlpt.runtime import tune_malloc, malloc_tuned; import os; tune_malloc(); "
            "print(malloc_tuned(), os.environ.get('RLPT_MALLOC_TUNING'), os.getpid())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_tune_malloc_reexecs_once_with_the_settings():
    env = {k: v for k, v in os.environ.items() if k not in runtime.MALLOC_ENV and k != "RLPT_MALLOC_TUNING"}
    tuned, flag, _ = _probe(env)
    assert (tuned, flag) == ("True", "0")  # re-exec'd with the settings, and marked so it never loops
    tuned, flag, _ = _probe(dict(env, RLPT_MALLOC_TUNING="0"))  # opted out: untouched
    assert (tuned, flag) == ("False", "0")


def test_build_train_step_accepts_default_options():
    import optax

    from rlpt.train.step import build_train_step

    def loss(params, frozen, mb, rng):
        return jnp.sum((mb["x"] @ params["w"]) ** 2), jnp.float32(1.0), {}

    from rlpt.train.state import create_state
    opt = optax.sgd(0.1)
    for co in ("auto", None):
        state = create_state({"w": jnp.ones((3, 2))}, opt, seed=0)
        step = build_train_step(loss, opt, compiler_options=co, donate=False)
        _, m = step(state, {"x": jnp.ones((1, 4, 3))})
        assert float(m["loss"]) == pytest.approx(4 * 2 * 9.0)
