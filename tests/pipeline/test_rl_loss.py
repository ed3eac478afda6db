"""The RL loss on the shared step: on-policy PPO gradient equals the policy-gradient identity."""
import jax
import jax.numpy as jnp
import numpy as np

from rlpt.config.schema import AlgoConfig
from rlpt.models import ModelConfig, init_model
from rlpt.train.losses import rl_loss, token_logprobs

CFG = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2)


def _batch(params, rng):
    B, T = 4, 10
    inputs = rng.integers(0, 32, (B, T)).astype(np.int32)
    batch = {"inputs": inputs, "targets": np.roll(inputs, -1, 1), "positions": np.tile(np.arange(T), (B, 1)),
             "segment_ids": np.ones((B, T), np.int32)}
    mask = np.zeros((B, T), np.float32)
    mask[:, 4:9] = 1
    mask[3, 7:] = 0
    batch["loss_mask"] = mask
    batch["advantages"] = (rng.normal(size=(B, 1)) * mask).astype(np.float32)
    logp = token_logprobs(params, CFG, jax.tree.map(jnp.asarray, batch))
    batch["old_logp"] = batch["rollout_logp"] = np.asarray(logp) * mask
    return jax.tree.map(jnp.asarray, batch)


def test_on_policy_ppo_gradient_is_policy_gradient():
    params = init_model(CFG, 0).params
    batch = _batch(params, np.random.default_rng(0))
    loss_fn = rl_loss(AlgoConfig(aggregation="token-mean"))(CFG)

    def ours(p):
        num, den, _ = loss_fn(p, {}, batch, None)
        return num / den

    def identity(p):
        logp = token_logprobs(p, CFG, batch)
        m = batch["loss_mask"]
        return -jnp.sum(batch["advantages"] * logp * m) / jnp.sum(m)

    g1, g2 = jax.grad(ours)(params), jax.grad(identity)(params)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)


def test_seq_mean_aggregation_and_micro_scope():
    params = init_model(CFG, 1).params
    batch = _batch(params, np.random.default_rng(1))
    num, den, _ = rl_loss(AlgoConfig(aggregation="seq-mean-token-mean"))(CFG)(params, {}, batch, None)
    assert float(den) == 4.0  # four sequences with policy tokens
    m = np.asarray(batch["loss_mask"])
    per_seq = -(np.asarray(batch["advantages"]) * m).sum(1) / m.sum(1)  # ratio 1: loss = -A per token
    np.testing.assert_allclose(float(num), per_seq.sum(), rtol=1e-5)
    num, den, _ = rl_loss(AlgoConfig(scope="micro"))(CFG)(params, {}, batch, None)
    assert float(den) == 1.0
