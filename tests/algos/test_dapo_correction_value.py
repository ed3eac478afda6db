"""DAPO shaping, rollout/trainer importance correction and the clipped value loss against hand values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.algos import (
    dynamic_sampling_keep,
    kept_row_indices,
    overlong_filter,
    rollout_correction,
    soft_overlong_penalty,
    value_loss,
)


def test_dynamic_sampling_drops_zero_variance_and_empty_groups():
    rewards = jnp.array([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0])
    gids = jnp.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3])
    keep_groups, keep_rows = dynamic_sampling_keep(rewards, gids, 5)
    # all-correct, all-wrong, single-sample and empty groups carry no signal
    np.testing.assert_array_equal(keep_groups, [False, True, False, False, False])
    np.testing.assert_array_equal(kept_row_indices(keep_rows), [3, 4, 5])


def test_dynamic_sampling_tolerance():
    rewards = jnp.array([0.5, 0.5001, 0.0, 1.0])
    _, keep_rows = dynamic_sampling_keep(rewards, jnp.array([0, 0, 1, 1]), 2, tol=1e-3)
    np.testing.assert_array_equal(keep_rows, [False, False, True, True])


def test_overlong_filter():
    mask = jnp.ones((3, 2))
    out = overlong_filter(mask, jnp.array([False, True, False]))
    np.testing.assert_array_equal(out, [[1, 1], [0, 0], [1, 1]])


def test_soft_overlong_penalty_dapo_eq13():
    # L_max = 20, L_cache = 5: free up to 15, linear to -1 at 20, -1 beyond
    pen = soft_overlong_penalty(jnp.array([10, 15, 16, 18, 20, 21]), max_length=20, cache_length=5)
    np.testing.assert_allclose(pen, [0.0, 0.0, -0.2, -0.6, -1.0, -1.0], rtol=1e-6, atol=1e-7)
    half = soft_overlong_penalty(jnp.array([16]), 20, 5, penalty_factor=0.5)
    np.testing.assert_allclose(half, [-0.1], rtol=1e-6)
    with pytest.raises(ValueError, match="cache_length"):
        soft_overlong_penalty(jnp.array([1]), 4, 8)


TRAINER = jnp.log(jnp.array([[0.5, 3.0, 1.5, 9.0]]))
ROLLOUT = jnp.zeros((1, 4))
MASK = jnp.array([[1.0, 1.0, 1.0, 0.0]])  # last token is padding


def test_token_tis_and_mis():
    w, keep, m = rollout_correction(TRAINER, ROLLOUT, MASK, level="token", mode="truncate", cap=2.0)
    np.testing.assert_allclose(w, [[0.5, 2.0, 1.5, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(keep, MASK)
    assert float(m["is_out_of_range_frac"]) == pytest.approx(1 / 3)
    assert float(m["logprob_abs_gap"]) == pytest.approx((np.log(2) + np.log(3) + np.log(1.5)) / 3, rel=1e-6)
    d = np.log([0.5, 3.0, 1.5])
    assert float(m["mismatch_kl_k3"]) == pytest.approx(np.mean(np.exp(d) - d - 1), rel=1e-6)
    w, keep, _ = rollout_correction(TRAINER, ROLLOUT, MASK, level="token", mode="mask", cap=2.0)
    np.testing.assert_allclose(w, [[0.5, 0.0, 1.5, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(keep, [[1, 0, 1, 0]])
    w, keep, _ = rollout_correction(TRAINER, ROLLOUT, MASK, mode="mask", cap=2.0, cap_low=0.6)
    np.testing.assert_array_equal(keep, [[0, 0, 1, 0]])


def test_sequence_and_geometric_levels():
    # product of the three real ratios = 2.25, geometric mean = 2.25 ** (1/3)
    w, _, _ = rollout_correction(TRAINER, ROLLOUT, MASK, level="sequence", mode="truncate", cap=2.0)
    np.testing.assert_allclose(w, [[2.0, 2.0, 2.0, 0.0]], rtol=1e-6)
    w, keep, _ = rollout_correction(TRAINER, ROLLOUT, MASK, level="sequence", mode="mask", cap=2.0)
    np.testing.assert_allclose(w, np.zeros((1, 4)))
    np.testing.assert_array_equal(keep, np.zeros((1, 4)))
    w, _, _ = rollout_correction(TRAINER, ROLLOUT, MASK, level="geometric", mode="truncate", cap=2.0)
    g = 2.25 ** (1 / 3)
    np.testing.assert_allclose(w, [[g, g, g, 0.0]], rtol=1e-6)


def test_correction_weights_carry_no_gradient_and_bad_names():
    g = jax.grad(lambda t: jnp.sum(rollout_correction(t, ROLLOUT, MASK)[0]))(TRAINER)
    assert float(jnp.abs(g).max()) == 0.0
    with pytest.raises(ValueError, match="unknown correction level 'seq'"):
        rollout_correction(TRAINER, ROLLOUT, MASK, level="seq")
    with pytest.raises(ValueError, match="unknown correction mode 'clip'"):
        rollout_correction(TRAINER, ROLLOUT, MASK, mode="clip")


def test_clipped_value_loss_hand_values():
    values = jnp.array([[1.0, 2.0, 5.0]])
    old = jnp.array([[0.5, 2.0, 0.0]])
    returns = jnp.array([[2.0, 1.0, 0.0]])
    mask = jnp.array([[1.0, 1.0, 0.0]])
    loss, m = value_loss(values, old, returns, mask, clip=0.2)
    # token 0: unclipped (1 - 2)^2 = 1, clipped V = 0.7 -> (0.7 - 2)^2 = 1.69, take the max
    np.testing.assert_allclose(loss, [[0.5 * 1.69, 0.5, 0.0]], rtol=1e-6)
    assert float(m["vf_clip_frac"]) == pytest.approx(0.5)
    g = jax.grad(lambda v: jnp.sum(value_loss(v, old, returns, mask, clip=0.2)[0]))(values)
    np.testing.assert_allclose(g, [[0.0, 1.0, 0.0]], atol=1e-6)  # token 0 is on the clipped branch
    plain, _ = value_loss(values, old, returns, mask, clip=None)
    np.testing.assert_allclose(plain, [[0.5, 0.5, 0.0]], rtol=1e-6)
