"""Preference losses and the Bradley-Terry reward-model loss against hand-computed values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.algos import PREFERENCE_LOSSES, PairedLogps, UnpairedLogps, bradley_terry_loss, get_preference_loss


def logsig(x):
    return -np.log1p(np.exp(-np.asarray(x, np.float64)))


# log-ratios: chosen (0.5, -0.5), rejected (-0.5, -0.5) -> delta (1, 0)
BATCH = PairedLogps(chosen=jnp.array([-1.0, -3.0]), rejected=jnp.array([-2.0, -2.5]),
                    ref_chosen=jnp.array([-1.5, -2.5]), ref_rejected=jnp.array([-1.5, -2.0]),
                    chosen_lengths=jnp.array([2.0, 4.0]), rejected_lengths=jnp.array([3.0, 5.0]))
DELTA = np.array([1.0, 0.0])
BETA = 0.5


def test_dpo_sigmoid_and_metrics():
    loss, m = get_preference_loss("sigmoid")(BATCH, beta=BETA)
    # -log sigmoid(0.5) = log(1 + e^-0.5) = 0.474077, -log sigmoid(0) = log 2
    assert float(loss) == pytest.approx((0.474077 + np.log(2)) / 2, rel=1e-5)
    assert float(m["rewards_chosen"]) == pytest.approx(0.0)  # 0.5 * (0.5 - 0.5) / 2
    assert float(m["rewards_rejected"]) == pytest.approx(-0.25)
    assert float(m["reward_accuracy"]) == pytest.approx(0.5)  # pair 1 ties: not counted as correct
    assert float(m["reward_margin"]) == pytest.approx(0.25)


def test_conservative_dpo_label_smoothing():
    loss, _ = get_preference_loss("sigmoid")(BATCH, beta=BETA, label_smoothing=0.1)
    z = BETA * DELTA
    expected = np.mean(-0.9 * logsig(z) - 0.1 * logsig(-z))
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_robust_dpo():
    loss, _ = get_preference_loss("robust")(BATCH, beta=BETA, label_smoothing=0.2)
    z = BETA * DELTA
    expected = np.mean((-0.8 * logsig(z) + 0.2 * logsig(-z)) / 0.6)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match=r"label_smoothing in \[0, 0.5\)"):
        get_preference_loss("robust")(BATCH, beta=BETA, label_smoothing=0.5)


def test_hinge():
    loss, _ = get_preference_loss("hinge")(BATCH, beta=BETA)
    assert float(loss) == pytest.approx(np.mean([0.5, 1.0]))  # relu(1 - 0.5 * delta)


def test_ipo_length_normalised_and_raw():
    loss, _ = get_preference_loss("ipo")(BATCH, beta=BETA)
    d = np.array([0.5 / 2 - (-0.5) / 3, -0.5 / 4 - (-0.5) / 5])
    assert float(loss) == pytest.approx(np.mean((d - 1.0) ** 2), rel=1e-5)  # 1 / (2 beta) = 1
    raw, _ = get_preference_loss("ipo")(BATCH, beta=BETA, length_normalize=False)
    assert float(raw) == pytest.approx(np.mean((DELTA - 1.0) ** 2), rel=1e-5)


def test_simpo_reference_free_length_normalised_margin():
    batch = BATCH._replace(ref_chosen=None, ref_rejected=None)
    loss, m = get_preference_loss("simpo")(batch, beta=2.0, gamma=0.5)
    avg_c, avg_r = np.array([-0.5, -0.75]), np.array([-2 / 3, -0.5])
    assert float(loss) == pytest.approx(np.mean(-logsig(2.0 * (avg_c - avg_r) - 0.5)), rel=1e-5)
    assert float(m["rewards_chosen"]) == pytest.approx(np.mean(2.0 * avg_c), rel=1e-5)


def test_orpo_with_nll_term():
    batch = PairedLogps(chosen=jnp.array([-1.0, -3.0]), rejected=jnp.array([-2.0, -2.5]),
                        chosen_lengths=jnp.array([2.0, 4.0]), rejected_lengths=jnp.array([3.0, 5.0]))
    loss, m = get_preference_loss("orpo")(batch, beta=0.1)
    c, r = np.array([-0.5, -0.75]), np.array([-2 / 3, -0.5])
    log_odds = (c - r) - (np.log(1 - np.exp(c)) - np.log(1 - np.exp(r)))
    nll = 4.0 / 6.0  # (1 + 3) / (2 + 4) chosen tokens
    assert float(loss) == pytest.approx(nll - 0.1 * np.mean(logsig(log_odds)), rel=1e-5)
    assert float(m["nll_loss"]) == pytest.approx(nll, rel=1e-6)
    assert float(m["log_odds_chosen"]) == pytest.approx(np.mean(log_odds), rel=1e-5)


def test_kto_reference_point_and_weights():
    batch = UnpairedLogps(logps=jnp.array([-1.0, -2.0, -3.0]), ref_logps=jnp.array([-1.5, -1.5, -2.0]),
                          labels=jnp.array([True, False, True]),
                          kl_logps=jnp.array([-2.0, -2.0, -2.0]), ref_kl_logps=jnp.array([-2.4, -2.2, -2.0]))
    loss, m = get_preference_loss("kto")(batch, beta=0.5, desirable_weight=1.0, undesirable_weight=2.0)
    z0 = 0.2  # mean(0.4, 0.2, 0) clamped at 0
    r = np.array([0.5, -0.5, -1.0])
    sig = lambda x: 1 / (1 + np.exp(-x))
    per = [1 - sig(0.5 * (r[0] - z0)), 2.0 * (1 - sig(0.5 * (z0 - r[1]))), 1 - sig(0.5 * (r[2] - z0))]
    assert float(loss) == pytest.approx(np.mean(per), rel=1e-5)
    assert float(m["kl"]) == pytest.approx(z0, rel=1e-5)
    assert float(m["rewards_chosen"]) == pytest.approx(0.5 * (0.5 - 1.0) / 2, rel=1e-6)
    # a negative KL estimate is clamped to zero
    neg = batch._replace(kl_logps=jnp.array([-3.0, -3.0, -3.0]))
    assert float(get_preference_loss("kto")(neg, beta=0.5)[1]["kl"]) == 0.0
    with pytest.raises(TypeError, match="UnpairedLogps"):
        get_preference_loss("kto")(BATCH)


def test_bradley_terry_with_margin_and_gradient():
    c, r = jnp.array([2.0, 0.0]), jnp.array([1.0, 1.0])
    loss, m = bradley_terry_loss(c, r)
    assert float(loss) == pytest.approx(np.mean(-logsig([1.0, -1.0])), rel=1e-6)
    assert float(m["accuracy"]) == 0.5
    loss_m, _ = bradley_terry_loss(c, r, margin=jnp.array([0.5, 0.0]))
    assert float(loss_m) == pytest.approx(np.mean(-logsig([0.5, -1.0])), rel=1e-6)
    # d/ds_c mean(-log sigmoid(s_c - s_r)) = -(1 - sigmoid(d)) / B
    g = jax.grad(lambda s: bradley_terry_loss(s, r)[0])(c)
    np.testing.assert_allclose(g, -(1 - 1 / (1 + np.exp(-np.array([1.0, -1.0])))) / 2, rtol=1e-6)
    centred, _ = bradley_terry_loss(c, r, center_coef=0.01)
    assert float(centred) == pytest.approx(float(loss) + 0.01 * np.mean([9.0, 1.0]), rel=1e-6)


def test_missing_reference_is_a_clear_error():
    with pytest.raises(ValueError, match=r"'sigmoid' needs PairedLogps.ref_chosen"):
        get_preference_loss("sigmoid")(BATCH._replace(ref_chosen=None))
    with pytest.raises(KeyError, match="unknown preference loss 'dpo'"):
        get_preference_loss("dpo")
    assert set(PREFERENCE_LOSSES) == {"sigmoid", "robust", "hinge", "ipo", "simpo", "orpo", "kto"}
