"""Layout permutations (contiguous, zigzag, striped) and the per-device causal work balance."""
import numpy as np
import pytest
from rlpt.kernels.layouts import (
    apply_layout,
    apply_layout_batch,
    causal_work,
    invert_layout,
    layout_permutation,
    work_balance,
)


def test_zigzag_puts_chunks_i_and_2n_minus_1_minus_i_on_device_i():
    n, T = 4, 32
    shards = np.split(layout_permutation("zigzag", T, n), n)
    for i, shard in enumerate(shards):
        chunks = sorted({int(t) // (T // (2 * n)) for t in shard})
        assert chunks == [i, 2 * n - 1 - i]


def test_striped_device_i_holds_tokens_i_mod_n():
    n, T = 8, 64
    for i, shard in enumerate(np.split(layout_permutation("striped", T, n), n)):
        np.testing.assert_array_equal(shard, np.arange(i, T, n))


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped"])
def test_apply_then_invert_is_identity(layout):
    x = np.arange(2 * 48 * 3).reshape(2, 48, 3)
    y = apply_layout(x, layout, 4)
    assert sorted(y[0, :, 0]) == sorted(x[0, :, 0])
    np.testing.assert_array_equal(invert_layout(y, layout, 4), x)
    batch = apply_layout_batch({"tokens": x[..., 0], "positions": x[..., 1]}, layout, 4)
    np.testing.assert_array_equal(batch["positions"], y[..., 1])


def test_bad_layout_and_length_are_named():
    with pytest.raises(ValueError, match="unknown layout 'spiral'"):
        layout_permutation("spiral", 16, 2)
    with pytest.raises(ValueError, match="seq_len 20 must be divisible by 16"):
        layout_permutation("zigzag", 20, 8)


def test_work_balance_zigzag_and_striped_vs_contiguous():
    n, T = 8, 1024
    pos = np.arange(T, dtype=np.int32)[None]
    seg = np.ones((1, T), np.int32)
    bal = {lay: work_balance(apply_layout(pos, lay, n), apply_layout(seg, lay, n), n)
           for lay in ("contiguous", "zigzag", "striped")}
    assert bal["zigzag"] <= 1.05
    assert bal["striped"] <= 1.05
    assert bal["contiguous"] > 1.8  # the last device does ~15/8 of the mean causal work
    total = causal_work(apply_layout(pos, "zigzag", n), apply_layout(seg, "zigzag", n), n).sum()
    assert total == T * (T + 1) // 2  # every visible causal pair counted exactly once


@pytest.mark.parametrize("layout", ["zigzag", "striped"])
def test_index_keys_follow_the_permutation(layout):
    """A column-index array of a batch moves with its columns: gathering from the permuted batch with it reads
    the same values as gathering from the original."""
    from rlpt.kernels.layouts import apply_layout_batch

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 16))
    idx = np.stack([rng.permutation(16)[:5] for _ in range(3)])
    out = apply_layout_batch({"x": x, "window": idx}, layout, 2, index_keys=("window",))
    assert out["window"].shape == idx.shape
    np.testing.assert_array_equal(np.take_along_axis(out["x"], out["window"], 1), np.take_along_axis(x, idx, 1))
