"""RoPE's cos/sin are computed once per forward: the same values as a direct evaluation, one evaluation site."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models import ModelConfig, init_model
from rlpt.models.rope import rope_cos_sin, rope_frequencies
from rlpt.models.transformer import forward

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=3, num_heads=4, num_kv_heads=2)


@pytest.mark.parametrize("low", [0, -5])  # negative positions take the loop's second trip: same values
def test_cos_sin_equal_direct_evaluation(low):
    positions = jnp.asarray(np.random.default_rng(0).integers(low, 4000, (3, 7)), jnp.int32)
    cos, sin = jax.jit(lambda p: rope_cos_sin(CFG, p))(positions)
    inv, scale = rope_frequencies(CFG, positions)
    freqs = np.asarray(positions, np.float32)[:, :, None] * np.asarray(inv)[:, None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    np.testing.assert_allclose(cos, np.cos(emb) * scale, rtol=0, atol=2e-6)
    np.testing.assert_allclose(sin, np.sin(emb) * scale, rtol=0, atol=2e-6)


def test_one_cosine_per_training_forward():
    """With unrolled layers XLA would fuse the cos into every layer's RoPE (forward and backward: 18 sites for
    these 3 layers) and evaluate it per head there; the compiled gradient of a forward with runtime positions
    evaluates it once."""
    cfg = dataclasses.replace(CFG, scan_layers=False)
    params = init_model(cfg, seed=0).params
    grad = jax.jit(lambda p, t, pos: jax.grad(lambda p: forward(p, cfg, t, pos).sum())(p))
    toks = jnp.zeros((2, 8), jnp.int32)
    hlo = grad.lower(params, toks, jnp.zeros((2, 8), jnp.int32)).compile().as_text()
    assert hlo.count(" cosine(") == 1 and hlo.count(" sine(") == 1
