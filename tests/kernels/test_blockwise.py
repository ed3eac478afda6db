"""blockwise attention against the reference: forward, lse and dq/dk/dv, float32 and bfloat16."""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rlpt.kernels.blockwise import blockwise_attention

from rlpt import kernels

from .conftest import CASES, TOL, assert_matches, make_case, outputs_and_grads

# Small blocks so every case crosses several query and key blocks; odd sizes exercise the padding path.
SMALL = partial(blockwise_attention, block_q=16, block_k=32)
ODD = partial(blockwise_attention, block_q=24, block_k=40)


@pytest.mark.parametrize("name", list(CASES))
def test_blockwise_matches_reference_f32(name, reference_result):
    assert_matches(outputs_and_grads(SMALL, make_case(name)), reference_result(name), TOL["float32"])


def test_blockwise_bf16_masks(reference_result):
    got = outputs_and_grads(SMALL, make_case("masks", dtype=jnp.bfloat16))
    assert_matches(got, reference_result("masks", "bfloat16"), TOL["bfloat16"])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASES if n != "masks"])
def test_blockwise_bf16(name, reference_result):
    got = outputs_and_grads(SMALL, make_case(name, dtype=jnp.bfloat16))
    assert_matches(got, reference_result(name, "bfloat16"), TOL["bfloat16"])


def test_blockwise_block_sizes_not_dividing_T(reference_result):
    assert_matches(outputs_and_grads(ODD, make_case("masks")), reference_result("masks"), TOL["float32"])


def test_fully_masked_rows_are_zero_and_finite():
    c = make_case("masks")
    out, lse, grads = outputs_and_grads(SMALL, c)
    qseg, kseg = np.asarray(c["qseg"]), np.asarray(c["kseg"])
    blind = ~np.any((qseg[:, :, None] == kseg[:, None, :]) & (qseg[:, :, None] != 0), axis=-1)  # (B, T)
    assert blind.sum() > 40  # the case really has padding rows and rows whose segment has no keys
    assert np.all(np.asarray(out)[blind] == 0)
    assert np.all(np.isneginf(np.asarray(lse).transpose(0, 2, 1)[blind]))
    assert np.all(np.asarray(grads[0])[blind] == 0)


def test_dispatch_by_name_and_unknown_impl():
    c = make_case("window")

    @partial(jax.jit, static_argnames="impl")
    def run(q, k, v, qpos, qseg, impl):
        return kernels.attention(q, k, v, q_positions=qpos, kv_positions=qpos, q_segment_ids=qseg,
                                 kv_segment_ids=qseg, causal=True, sliding_window=12, impl=impl)
    ref = run(c["q"], c["k"], c["v"], c["qpos"], c["qseg"], "reference")
    got = run(c["q"], c["k"], c["v"], c["qpos"], c["qseg"], "blockwise")
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=2e-6)
    with pytest.raises(ValueError, match="unknown attention impl 'nope'"):
        kernels.attention(c["q"], c["k"], c["v"], impl="nope")
