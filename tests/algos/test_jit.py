"""The algos pieces compose under one jax.jit (static num_groups / names), matching eager results."""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.algos import aggregate, get_advantage, get_kl, get_policy_loss


def rl_loss(logp, old, ref, rewards, mask, gids, *, num_groups, beta):
    adv, _ = get_advantage("grpo")(rewards, mask, gids, num_groups=num_groups)
    per_token, metrics = get_policy_loss("ppo")(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    per_token = per_token + beta * get_kl("k3")(logp, ref) * mask
    return aggregate(per_token, mask, "token-mean"), metrics


def test_jitted_step_matches_eager():
    rng = np.random.default_rng(0)
    mask = jnp.asarray((np.arange(5)[None] < rng.integers(1, 6, size=(6, 1))).astype(np.float32))
    logp = jnp.asarray(-rng.uniform(0.1, 2, size=(6, 5)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(0, 0.3, size=(6, 5)), jnp.float32)
    ref = logp + jnp.asarray(rng.normal(0, 0.3, size=(6, 5)), jnp.float32)
    rewards = jnp.asarray([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    gids = jnp.asarray([0, 0, 0, 1, 1, 1])
    f = partial(rl_loss, num_groups=2, beta=0.04)
    args = (logp, old, ref, rewards, mask, gids)
    (eager_loss, eager_m), eager_g = jax.value_and_grad(f, has_aux=True)(*args)
    (jit_loss, jit_m), jit_g = jax.jit(jax.value_and_grad(f, has_aux=True))(*args)
    np.testing.assert_allclose(jit_loss, eager_loss, rtol=1e-6)
    np.testing.assert_allclose(jit_g, eager_g, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(jit_m["clip_frac"], eager_m["clip_frac"])
    assert float(jnp.abs(jit_g).max()) > 0
