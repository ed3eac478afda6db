"""Advantage estimators against hand-computed values."""
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.algos import (
    ADVANTAGES,
    discounted_returns,
    gae_advantages,
    get_advantage,
    group_normalized_advantages,
    masked_whiten,
    outcome_token_rewards,
    rloo_advantages,
)

# Two groups of three: group 0 rewards (1, 0, 0), group 1 rewards (2, 4, 6).
REWARDS = jnp.array([1.0, 0.0, 0.0, 2.0, 4.0, 6.0])
GIDS = jnp.array([0, 0, 0, 1, 1, 1])
S3 = 1 / np.sqrt(3)  # group 0: mean 1/3, Bessel std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = 1/sqrt(3)


def test_grpo_group_scale_hand_values():
    adv = group_normalized_advantages(REWARDS, GIDS, 2, scale="group", eps=0.0)
    # group 1: mean 4, Bessel std sqrt((4 + 0 + 4) / 2) = 2
    np.testing.assert_allclose(adv, [(2 / 3) / S3, (-1 / 3) / S3, (-1 / 3) / S3, -1.0, 0.0, 1.0], rtol=1e-6)


def test_grpo_eps_and_zero_variance_group():
    r = jnp.array([1.0, 1.0, 0.0, 2.0])
    adv = group_normalized_advantages(r, jnp.array([0, 0, 1, 1]), 2, scale="group", eps=1e-4)
    std1 = np.sqrt(2.0)  # (0, 2): mean 1, Bessel std sqrt(2)
    np.testing.assert_allclose(adv, [0.0, 0.0, -1 / (std1 + 1e-4), 1 / (std1 + 1e-4)], rtol=1e-6)


def test_grpo_groups_need_not_be_adjacent():
    order = jnp.array([3, 0, 5, 1, 4, 2])
    adv = group_normalized_advantages(REWARDS[order], GIDS[order], 2, eps=0.0)
    expected = group_normalized_advantages(REWARDS, GIDS, 2, eps=0.0)[order]
    np.testing.assert_allclose(adv, expected, rtol=1e-6)


def test_grpo_batch_scale_and_none():
    none = group_normalized_advantages(REWARDS, GIDS, 2, scale="none")
    np.testing.assert_allclose(none, [2 / 3, -1 / 3, -1 / 3, -2.0, 0.0, 2.0], rtol=1e-6)
    batch = group_normalized_advantages(REWARDS, GIDS, 2, scale="batch", eps=0.0)
    np.testing.assert_allclose(batch, np.asarray(none) / np.std(np.asarray(REWARDS), ddof=1), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown GRPO scale 'grp'"):
        group_normalized_advantages(REWARDS, GIDS, 2, scale="grp")


def test_single_sample_group_gets_zero():
    adv = group_normalized_advantages(jnp.array([3.0, 1.0, 2.0]), jnp.array([0, 1, 1]), 2)
    assert float(adv[0]) == 0.0
    assert float(rloo_advantages(jnp.array([3.0, 1.0, 2.0]), jnp.array([0, 1, 1]), 2)[0]) == 0.0


def test_rloo_hand_values():
    # r_i - mean of the other two: (1 - 0, 0 - 0.5, 0 - 0.5), (2 - 5, 4 - 4, 6 - 3)
    expected = [1.0, -0.5, -0.5, -3.0, 0.0, 3.0]
    np.testing.assert_allclose(rloo_advantages(REWARDS, GIDS, 2), expected, rtol=1e-6)


def test_outcome_token_rewards_last_policy_token():
    mask = jnp.array([[1, 1, 0], [1, 0, 1], [0, 0, 0]], jnp.float32)
    out = outcome_token_rewards(jnp.array([2.0, 3.0, 5.0]), mask)
    np.testing.assert_allclose(out, [[0, 2, 0], [0, 0, 3], [0, 0, 0]])


def test_discounted_returns_skip_masked_tokens():
    r = jnp.array([[0.0, 0.0, 1.0], [1.0, 5.0, 2.0]])
    mask = jnp.array([[1, 1, 1], [1, 0, 1]], jnp.float32)
    # row 0: G2 = 1, G1 = 0.5, G0 = 0.25; row 1: token 1 is not a policy token: G2 = 2, G0 = 1 + 0.5 * 2
    np.testing.assert_allclose(discounted_returns(r, mask, 0.5), [[0.25, 0.5, 1.0], [2.0, 0.0, 2.0]])


def test_masked_whiten_bessel():
    x = jnp.array([[1.0, 2.0], [3.0, 100.0]])
    mask = jnp.array([[1, 1], [1, 0]], jnp.float32)
    np.testing.assert_allclose(masked_whiten(x, mask, eps=0.0), [[-1.0, 0.0], [1.0, 0.0]], atol=1e-6)


def test_gae_hand_values():
    r = jnp.array([[0.0, 0.0, 1.0]])
    v = jnp.array([[0.5, 0.6, 0.7]])
    adv, ret = gae_advantages(r, v, jnp.ones((1, 3)), gamma=0.9, lam=0.8)
    # delta2 = 1 - 0.7 = 0.3; delta1 = 0.9 * 0.7 - 0.6 = 0.03; delta0 = 0.9 * 0.6 - 0.5 = 0.04
    a2 = 0.3
    a1 = 0.03 + 0.72 * a2
    a0 = 0.04 + 0.72 * a1
    np.testing.assert_allclose(adv, [[a0, a1, a2]], rtol=1e-6)
    np.testing.assert_allclose(ret, [[a0 + 0.5, a1 + 0.6, a2 + 0.7]], rtol=1e-6)


def test_gae_skips_masked_tokens():
    adv, _ = gae_advantages(jnp.array([[0.0, 0.0, 1.0]]), jnp.array([[0.5, 99.0, 0.7]]),
                            jnp.array([[1.0, 0.0, 1.0]]), gamma=0.9, lam=0.8)
    # the masked token's value is never used: delta0 = 0.9 * 0.7 - 0.5 = 0.13, A0 = 0.13 + 0.72 * 0.3
    np.testing.assert_allclose(adv, [[0.13 + 0.72 * 0.3, 0.0, 0.3]], rtol=1e-6)


MASK = jnp.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]], jnp.float32)


def test_registry_grpo_broadcasts_and_masks():
    adv, ret = get_advantage("grpo")(REWARDS, MASK, GIDS, num_groups=2, eps=0.0)
    per_row = group_normalized_advantages(REWARDS, GIDS, 2, eps=0.0)
    np.testing.assert_allclose(adv, per_row[:, None] * MASK, rtol=1e-6)
    np.testing.assert_allclose(ret, REWARDS[:, None] * MASK)


def test_registry_token_rewards_are_summed():
    token_r = outcome_token_rewards(REWARDS, MASK) - 0.1 * MASK  # e.g. a per-token KL penalty
    adv, _ = get_advantage("dr_grpo")(token_r, MASK, GIDS, num_groups=2)
    scores = REWARDS - 0.1 * MASK.sum(-1)
    expected = group_normalized_advantages(scores, GIDS, 2, scale="none")
    np.testing.assert_allclose(adv, expected[:, None] * MASK, rtol=1e-5, atol=1e-6)


def test_registry_rloo():
    adv, _ = get_advantage("rloo")(REWARDS, MASK, GIDS, num_groups=2)
    np.testing.assert_allclose(adv, np.array([1.0, -0.5, -0.5, -3.0, 0.0, 3.0])[:, None] * MASK, rtol=1e-6)


def test_reinforce_pp_hand_values():
    mask = jnp.array([[1, 1], [1, 0]], jnp.float32)
    adv, ret = get_advantage("reinforce_pp")(jnp.array([1.0, 0.0]), mask, jnp.array([0, 1]), num_groups=2)
    np.testing.assert_allclose(ret, [[1.0, 1.0], [0.0, 0.0]])
    # masked returns (1, 1, 0): mean 2/3, Bessel var 1/3
    s = np.sqrt(1 / 3)
    np.testing.assert_allclose(adv, [[(1 / 3) / s, (1 / 3) / s], [(-2 / 3) / s, 0.0]], rtol=1e-5)


def test_reinforce_pp_baseline_hand_values():
    mask = jnp.ones((4, 2))
    adv, _ = get_advantage("reinforce_pp_baseline")(jnp.array([1.0, 0.0, 3.0, 1.0]), mask,
                                                    jnp.array([0, 0, 1, 1]), num_groups=2)
    centred = np.array([0.5, -0.5, 1.0, -1.0])
    std = np.sqrt(2 * (0.25 + 0.25 + 1 + 1) / 7)  # 8 tokens, mean 0, Bessel
    np.testing.assert_allclose(adv, np.repeat(centred[:, None], 2, 1) / std, rtol=1e-5)


def test_registry_gae_needs_values_and_whitens():
    mask = jnp.ones((1, 3))
    with pytest.raises(ValueError, match="needs values"):
        get_advantage("gae")(jnp.array([1.0]), mask, jnp.array([0]), num_groups=1)
    v = jnp.array([[0.5, 0.6, 0.7]])
    raw, ret = get_advantage("gae")(jnp.array([1.0]), mask, jnp.array([0]), num_groups=1, values=v,
                                    gamma=0.9, lam=0.8, whiten=False)
    a2 = 0.3
    a1 = 0.03 + 0.72 * a2
    np.testing.assert_allclose(raw, [[0.04 + 0.72 * a1, a1, a2]], rtol=1e-6)
    white, _ = get_advantage("gae")(jnp.array([1.0]), mask, jnp.array([0]), num_groups=1, values=v,
                                    gamma=0.9, lam=0.8)
    np.testing.assert_allclose(white, (raw - raw.mean()) / np.std(np.asarray(raw), ddof=1), rtol=1e-4)


def test_unknown_estimator_names_known_ones():
    with pytest.raises(KeyError, match=r"unknown advantage estimator 'gpro'.*'grpo'"):
        get_advantage("gpro")
    assert {"grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"} <= set(ADVANTAGES)


def test_registry_rejects_duplicate_names_and_keeps_dict_semantics():
    from rlpt.algos import Registry

    reg = Registry("widget")

    @reg.register("a")
    def a():
        return 1

    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.register("a")(lambda: 2)
    assert reg.lookup("a") is a and reg.get("b", None) is None
    with pytest.raises(KeyError, match=r"unknown widget 'b'; known: \['a'\]"):
        reg.lookup("b")
