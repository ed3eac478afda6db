"""Policy losses (PPO clip, clip-higher, dual-clip, log-ratio clamp, GSPO, CISPO) against hand values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.algos import POLICY_LOSSES, get_policy_loss

OLD = jnp.zeros((1, 4))
LOGP = jnp.log(jnp.array([[1.5, 0.5, 1.1, 0.7]]))  # ratios 1.5, 0.5, 1.1, 0.7
ADV = jnp.array([[1.0, 1.0, -1.0, -1.0]])
MASK = jnp.ones((1, 4))


def test_ppo_symmetric_clip_hand_values():
    loss, m = get_policy_loss("ppo")(LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2)
    # max(-A r, -A clip(r, 0.8, 1.2)):
    # (-1.5, -1.2) -> -1.2; (-0.5, -0.8) -> -0.5; (1.1, 1.1) -> 1.1; (0.7, 0.8) -> 0.8
    np.testing.assert_allclose(loss, [[-1.2, -0.5, 1.1, 0.8]], rtol=1e-6)
    assert float(m["clip_frac"]) == pytest.approx(0.5)
    assert float(m["clip_frac_high"]) == pytest.approx(0.25)
    assert float(m["clip_frac_low"]) == pytest.approx(0.25)
    assert float(m["ratio_max"]) == pytest.approx(1.5, rel=1e-6)
    assert float(m["ratio_min"]) == pytest.approx(0.5, rel=1e-6)
    assert float(m["ratio_mean"]) == pytest.approx((1.5 + 0.5 + 1.1 + 0.7) / 4, rel=1e-6)
    assert float(m["approx_kl"]) == pytest.approx(-float(jnp.mean(LOGP)), rel=1e-6)


def test_ppo_gradient_is_zero_on_clipped_tokens():
    def f(logp):
        return jnp.sum(get_policy_loss("ppo")(logp, OLD, ADV, MASK, clip_high=0.2)[0])

    # d(-A r)/dlogp = -A r where unclipped, 0 where the clipped branch is active
    np.testing.assert_allclose(jax.grad(f)(LOGP), [[0.0, -0.5, 1.1, 0.0]], rtol=1e-6)


def test_ppo_clip_higher():
    loss, _ = get_policy_loss("ppo")(LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    np.testing.assert_allclose(loss, [[-1.28, -0.5, 1.1, 0.8]], rtol=1e-6)


def test_ppo_dual_clip_bounds_negative_advantages_only():
    logp = jnp.log(jnp.array([[4.0, 4.0]]))
    adv = jnp.array([[-1.0, 1.0]])
    loss, m = get_policy_loss("ppo")(logp, jnp.zeros((1, 2)), adv, jnp.ones((1, 2)), clip_high=0.2, dual_clip=3.0)
    # A < 0: max(4, 1.2) = 4, then min(4, 3) = 3; A > 0: max(-4, -1.2) = -1.2, untouched
    np.testing.assert_allclose(loss, [[3.0, -1.2]], rtol=1e-6)
    assert float(m["dual_clip_frac"]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        get_policy_loss("ppo")(logp, jnp.zeros((1, 2)), adv, jnp.ones((1, 2)), dual_clip=0.5)


def test_ppo_log_ratio_clamp():
    one = jnp.ones((1, 1))
    loss, m = get_policy_loss("ppo")(30.0 * one, 0.0 * one, -one, one, log_ratio_clamp=20.0)
    np.testing.assert_allclose(loss, [[np.exp(20.0)]], rtol=1e-5)
    assert float(m["ratio_max"]) == pytest.approx(np.exp(20.0), rel=1e-5)


def test_ppo_masked_tokens_are_zero_and_ignored_in_metrics():
    mask = jnp.array([[1.0, 1.0, 0.0, 0.0]])
    loss, m = get_policy_loss("ppo")(LOGP, OLD, ADV, mask, clip_high=0.2)
    np.testing.assert_allclose(loss, [[-1.2, -0.5, 0.0, 0.0]], rtol=1e-6)
    assert float(m["clip_frac"]) == pytest.approx(0.5)
    assert float(m["ratio_min"]) == pytest.approx(0.5, rel=1e-6)


def test_gspo_sequence_ratio_is_geometric_mean():
    logp = jnp.log(jnp.array([[1.2, 0.8, 50.0]]))  # third token is padding
    mask = jnp.array([[1.0, 1.0, 0.0]])
    adv = jnp.ones((1, 3))
    loss, _ = get_policy_loss("gspo")(logp, jnp.zeros((1, 3)), adv, mask, clip_low=0.2, clip_high=0.2)
    s = np.sqrt(1.2 * 0.8)
    np.testing.assert_allclose(loss, [[-s, -s, 0.0]], rtol=1e-6)

    # d/dlogp_t of sum_t(-s) over 2 tokens = -2 * s * (1/2) for each real token
    g = jax.grad(lambda lp: jnp.sum(get_policy_loss("gspo")(lp, jnp.zeros((1, 3)), adv, mask,
                                                           clip_low=0.2, clip_high=0.2)[0]))(logp)
    np.testing.assert_allclose(g, [[-s, -s, 0.0]], rtol=1e-6)


def test_gspo_clips_sequence_ratio():
    logp = jnp.log(jnp.array([[1.5, 1.5]]))
    loss, m = get_policy_loss("gspo")(logp, jnp.zeros((1, 2)), jnp.ones((1, 2)), jnp.ones((1, 2)))
    np.testing.assert_allclose(loss, [[-(1 + 4e-4), -(1 + 4e-4)]], rtol=1e-6)
    assert float(m["clip_frac"]) == 1.0


def test_cispo_clipped_stop_grad_weight():
    logp = jnp.array([[-1.0, -2.0, -0.5]])
    old = logp - jnp.log(jnp.array([[0.5, 3.0, 10.0]]))  # ratios 0.5, 3, 10
    adv = jnp.array([[1.0, -1.0, 2.0]])
    mask = jnp.ones((1, 3))
    loss, m = get_policy_loss("cispo")(logp, old, adv, mask, ratio_max=5.0)
    w = np.array([0.5, 3.0, 5.0])
    expected = -w * np.array([1.0, -1.0, 2.0]) * np.array([-1.0, -2.0, -0.5])
    np.testing.assert_allclose(loss, [expected], rtol=1e-6)
    g = jax.grad(lambda lp: jnp.sum(get_policy_loss("cispo")(lp, old, adv, mask, ratio_max=5.0)[0]))(logp)
    np.testing.assert_allclose(g, [[-0.5, 3.0, -10.0]], rtol=1e-6)  # every token keeps a gradient
    assert float(m["clip_frac"]) == pytest.approx(1 / 3)


def test_unknown_policy_loss():
    with pytest.raises(KeyError, match=r"unknown policy loss 'ppo2'.*'cispo', 'gspo', 'ppo'"):
        get_policy_loss("ppo2")
    assert set(POLICY_LOSSES) == {"ppo", "gspo", "cispo"}


def test_shape_mismatch_names_the_array():
    with pytest.raises(ValueError, match=r"advantages has shape \(1,\)"):
        get_policy_loss("ppo")(LOGP, OLD, jnp.ones((1,)), MASK)
    with pytest.raises(ValueError, match="logp must be"):
        get_policy_loss("cispo")(LOGP[0], OLD[0], ADV[0], MASK[0])


def test_ppo_ratio_cap_bounds_unclipped_branch():
    logp = jnp.log(jnp.array([[4.0, 4.0]]))
    loss, _ = get_policy_loss("ppo")(logp, jnp.zeros((1, 2)), jnp.array([[-1.0, 1.0]]), jnp.ones((1, 2)),
                                     clip_high=0.2, ratio_cap=3.0)
    # A < 0: max(-A min(r, 3), -A clip(r)) = max(3, 1.2); A > 0: max(-3, -1.2) = -1.2
    np.testing.assert_allclose(loss, [[3.0, -1.2]], rtol=1e-6)
