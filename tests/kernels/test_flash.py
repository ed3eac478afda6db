"""Pallas flash attention in interpret mode against the reference; the logged XLA fallback without a GPU."""
import logging
from functools import partial

import jax
import jax.numpy as jnp
import pytest
from rlpt.kernels.flash import flash_attention

from rlpt import kernels

from .conftest import CASES, TOL, assert_matches, make_case, outputs_and_grads

INTERPRET = partial(flash_attention, block_q=16, block_k=32, interpret=True)


def test_flash_interpret_masks_f32(reference_result):
    got = outputs_and_grads(INTERPRET, make_case("masks"))
    assert_matches(got, reference_result("masks"), TOL["float32"])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(CASES))
def test_flash_interpret_all_cases(name, dtype, reference_result):
    got = outputs_and_grads(INTERPRET, make_case(name, dtype=jnp.dtype(dtype)))
    assert_matches(got, reference_result(name, dtype), TOL[dtype])


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the fallback only happens without a GPU")
def test_flash_without_gpu_falls_back_and_logs_once(caplog, reference_result):
    from rlpt.kernels import flash
    flash._warn_fallback.cache_clear()
    c = make_case("softcap")
    with caplog.at_level(logging.WARNING, logger="rlpt.kernels.flash"):
        got = outputs_and_grads(partial(flash_attention, block_q=16, block_k=16), c)
        kernels.attention(c["q"], c["k"], c["v"], impl="flash", logit_softcap=2.0)
    warnings = [r for r in caplog.records if "blockwise" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert_matches(got, reference_result("softcap"), TOL["float32"])


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="compiles the Triton kernels: needs a GPU")
@pytest.mark.parametrize("dtype,tol", [("bfloat16", TOL["bfloat16"]), ("float32", 5e-3)])
@pytest.mark.parametrize("name", ["masks", "window", "softcap"])
def test_flash_gpu_compiled(name, dtype, tol):
    """Compiled Triton kernels vs the reference on a GPU; f32 dots there may use TF32, hence 5e-3."""
    c = make_case(name, dtype=jnp.dtype(dtype), T=256)
    got = outputs_and_grads(partial(flash_attention, block_q=64, block_k=64), c)
    assert_matches(got, outputs_and_grads(kernels.reference_attention, c), tol)
