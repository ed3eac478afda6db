"""KL estimators, entropy, KL-in-reward and loss aggregation against hand values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.algos import (
    aggregate,
    aggregate_with_denominator,
    entropy_from_logits,
    get_aggregation,
    get_kl,
    kl_in_reward,
    step_denominator,
)

LOGP = jnp.array([[-1.0, -2.0]])
REF = jnp.array([[-1.5, -1.0]])


def test_kl_estimators_hand_values():
    np.testing.assert_allclose(get_kl("k1")(LOGP, REF), [[0.5, -1.0]])
    np.testing.assert_allclose(get_kl("k2")(LOGP, REF), [[0.125, 0.5]])
    # k3 = exp(d) - d - 1 with d = ref - logp = (-0.5, 1)
    np.testing.assert_allclose(get_kl("k3")(LOGP, REF), [[np.exp(-0.5) - 0.5, np.e - 2.0]], rtol=1e-6)
    with pytest.raises(KeyError, match="unknown KL estimator 'k4'"):
        get_kl("k4")


def test_k3_is_unbiased_kl_estimate():
    p = jnp.array([0.7, 0.2, 0.1])
    q = jnp.array([0.5, 0.3, 0.2])
    exact = float(jnp.sum(p * jnp.log(p / q)))
    est = float(jnp.sum(p * get_kl("k3")(jnp.log(p), jnp.log(q))))  # expectation under p
    assert est == pytest.approx(exact, rel=1e-5)


def test_entropy_from_logits():
    logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]])) + 7.0  # shift-invariant
    expected = [[-(0.5 * np.log(0.5) + 0.5 * np.log(0.25)), np.log(3.0)]]
    np.testing.assert_allclose(entropy_from_logits(logits), expected, rtol=1e-5)


def test_kl_in_reward_outcome_and_no_gradient():
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    logp = jnp.array([[-1.0, -1.0, -9.0], [-2.0, -1.0, -0.5]])
    ref = jnp.array([[-1.5, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    out = kl_in_reward(jnp.array([1.0, 2.0]), logp, ref, mask, beta=0.1, estimator="k1")
    np.testing.assert_allclose(out, [[-0.05, 1.0, 0.0], [0.1, 0.0, 2.0 - 0.05]], rtol=1e-6, atol=1e-7)
    g = jax.grad(lambda lp: jnp.sum(kl_in_reward(jnp.array([1.0, 2.0]), lp, ref, mask, 0.1)))(logp)
    assert float(jnp.abs(g).max()) == 0.0


LOSS = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
AMASK = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 2 is all padding


@pytest.mark.parametrize("mode,cfg,num,den", [
    ("token-mean", {}, 7.0, 3.0),
    ("seq-mean-token-mean", {}, 1.5 + 4.0, 2.0),
    ("seq-mean-token-sum", {}, 7.0, 2.0),
    ("seq-mean-token-sum-norm", {"norm_constant": 4.0}, 7.0, 8.0),
])
def test_aggregation_hand_values(mode, cfg, num, den):
    n, d = get_aggregation(mode)(LOSS, AMASK, **cfg)
    assert float(n) == pytest.approx(num)
    assert float(d) == pytest.approx(den)
    assert float(aggregate(LOSS, AMASK, mode, **cfg)) == pytest.approx(num / den)


def test_sum_norm_needs_constant():
    with pytest.raises(ValueError, match="positive norm_constant"):
        get_aggregation("seq-mean-token-sum-norm")(LOSS, AMASK, norm_constant=None)
    with pytest.raises(KeyError, match="unknown loss aggregation 'mean'"):
        aggregate(LOSS, AMASK, "mean")


def test_step_scope_equals_one_big_batch_loss_and_gradient():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(4, 5)), jnp.float32)
    mask = jnp.asarray([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], jnp.float32)
    for mode in ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]:
        big = lambda w, mode=mode: aggregate(w * x, mask, mode)
        den = step_denominator([mask[:2], mask[2:]], mode)

        def split(w, mode=mode, den=den):
            return (aggregate_with_denominator(w[:2] * x[:2], mask[:2], mode, den)
                    + aggregate_with_denominator(w[2:] * x[2:], mask[2:], mode, den))

        w = jnp.ones((4, 5))
        assert float(split(w)) == pytest.approx(float(big(w)), rel=1e-6)
        np.testing.assert_allclose(jax.grad(split)(w), jax.grad(big)(w), rtol=1e-6)
    # micro-batch scope differs for token-mean when micro-batches hold different token counts
    micro = (aggregate(x[:2], mask[:2], "token-mean") + aggregate(x[2:], mask[2:], "token-mean")) / 2
    assert abs(float(micro) - float(aggregate(x, mask, "token-mean"))) > 1e-3
