"""Ring and all-gather attention on 8 fake CPU devices against the reference, for every layout."""
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from rlpt.kernels.blockwise import blockwise_attention
from rlpt.kernels.layouts import LAYOUTS, apply_layout, invert_layout
from rlpt.kernels.ring import make_context_parallel_attention

from rlpt import kernels

from .conftest import CASES, TOL, assert_matches, make_case, outputs_and_grads

N = 8
IDS = ("q", "k", "v", "qpos", "kpos", "qseg", "kseg", "w")


def _mesh(axis_type):
    return jax.make_mesh((N,), ("seq",), axis_types=(axis_type,))


def _stacked_layouts(c, layouts):
    """One batch holding the case once per layout (rows permuted by their layout): one compile tests all."""
    out = dict(c)
    for key in IDS:
        out[key] = jnp.concatenate([apply_layout(np.asarray(c[key]), lay, N) for lay in layouts])
    return out


def _per_layout(result, layouts):
    """Split a stacked result back per layout and undo each permutation (lse is (B, H, T): axis 2)."""
    out, lse, grads = (np.asarray(result[0]), np.asarray(result[1]), [np.asarray(g) for g in result[2]])
    for i, lay in enumerate(np.array_split(np.arange(out.shape[0]), len(layouts))):
        name = layouts[i]
        yield name, (invert_layout(out[lay], name, N), invert_layout(lse[lay], name, N, axis=2),
                     tuple(invert_layout(g[lay], name, N) for g in grads))


def _check(mode, name, reference_result, dtype="float32", axis_type=AxisType.Explicit, layouts=LAYOUTS):
    mesh = _mesh(axis_type)
    c = _stacked_layouts(make_case(name, dtype=jnp.dtype(dtype)), layouts)
    with jax.set_mesh(mesh):
        got = outputs_and_grads(make_context_parallel_attention(mesh, mode=mode), c)
    for layout, res in _per_layout(got, layouts):
        try:
            assert_matches(res, reference_result(name, dtype), TOL[dtype])
        except AssertionError as e:
            raise AssertionError(f"{mode} / {layout}: {e}") from None


def test_ring_exact_for_contiguous_zigzag_striped(reference_result):
    _check("ring", "masks", reference_result)


def test_allgather_exact_auto_axes(reference_result):
    _check("allgather", "masks", reference_result, axis_type=AxisType.Auto, layouts=("zigzag",))


def test_ring_by_name_under_jit_on_a_4_axis_mesh(reference_result):
    """The model's path: kernels.attention(impl="ring") inside jit reads the mesh set by jax.set_mesh;
    batch goes over data, heads over tensor, the sequence over seq. (Auto axes: test_long_context_model.)"""
    mesh = jax.make_mesh((2, 1, 2, 2), ("data", "fsdp", "tensor", "seq"), axis_types=(AxisType.Explicit,) * 4)
    c = make_case("window")  # B=2, H=4, KV=2: divisible by data and tensor

    def fn(q, k, v, qpos, kpos, qseg, kseg, **opts):
        return kernels.attention(q, k, v, q_positions=qpos, kv_positions=kpos, q_segment_ids=qseg,
                                 kv_segment_ids=kseg, impl="ring", return_lse=True, **opts)
    with jax.set_mesh(mesh):
        got = outputs_and_grads(fn, c)
    assert_matches(got, reference_result("window"), TOL["float32"])


def test_ring_without_mesh_or_axis_is_named():
    c = make_case("masks")
    with pytest.raises(ValueError, match="needs a mesh"):
        kernels.attention(c["q"], c["k"], c["v"], impl="ring")
    mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="no axis 'seq'"):
        kernels.attention(c["q"], c["k"], c["v"], impl="ring")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ring", "allgather"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(CASES))
def test_context_parallel_all_cases(mode, dtype, name, reference_result):
    _check(mode, name, reference_result, dtype=dtype)


@pytest.mark.slow
def test_ring_at_16k_tokens_on_8_devices_matches_blockwise():
    """Long context end to end at the attention level: T=16384, zigzag over 8 devices, 2 packed documents."""
    T, H, KV, D = int(os.environ.get("RLPT_RING_T", 16384)), 2, 1, 16
    keys = jax.random.split(jax.random.key(3), 4)
    q = jax.random.normal(keys[0], (1, T, H, D))
    k, v = (jax.random.normal(kk, (1, T, KV, D)) for kk in keys[1:3])
    w = jax.random.normal(keys[3], (1, T, H, D))
    pos = np.concatenate([np.arange(T // 4), np.arange(3 * T // 4)]).astype(np.int32)[None]
    seg = np.concatenate([np.ones(T // 4), 2 * np.ones(3 * T // 4)]).astype(np.int32)[None]
    c = dict(q=q, k=k, v=v, qpos=pos, kpos=pos, qseg=seg, kseg=seg, w=w,
             opts=dict(causal=True, sliding_window=None, logit_softcap=None))
    want = outputs_and_grads(partial(blockwise_attention, block_q=512, block_k=512), c)
    mesh = _mesh(AxisType.Explicit)
    with jax.set_mesh(mesh):
        got = outputs_and_grads(make_context_parallel_attention(mesh), _stacked_layouts(c, ("zigzag",)))
    (_, res), = _per_layout(got, ("zigzag",))
    assert_matches(res, want, TOL["float32"])
