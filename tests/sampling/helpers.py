"""Shared tiny models and the full-recomputation reference for the sampler tests."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.models import Model, ModelConfig, init_model
from rlpt.models.transformer import forward

TINY = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                   initializer_range=0.3)
PROMPTS = [[1, 2, 3], [5, 9, 4, 4, 7, 2, 2, 8, 1, 30, 31], [7, 8], [9, 10, 11, 12, 13], [40, 41, 42, 43, 44, 45, 46]]


@functools.cache
def tiny_model() -> Model:
    # A large init scale gives peaked logits, so argmax is not decided by float noise.
    return init_model(TINY, seed=0)


@functools.partial(jax.jit, static_argnums=1)
def _full_logits(params, cfg, tokens):
    return forward(params, cfg, tokens)


def full_logits(model, sequence, pad_to=64) -> np.ndarray:
    """Cache-free logits (T, V) of one sequence (f32); right padding (one compiled shape) cannot leak back."""
    padded = np.zeros((1, max(pad_to, len(sequence))), np.int32)
    padded[0, :len(sequence)] = sequence
    return np.asarray(_full_logits(model.params, model.config, jnp.asarray(padded)))[0, :len(sequence)]


def teacher_forced(model, context, new_tokens):
    """Logits (K, V) that predicted each of new_tokens after `context`, by one full forward pass."""
    seq = list(context) + list(new_tokens)
    return full_logits(model, seq)[len(context) - 1:len(seq) - 1]


def log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def fixed_logits_model(target_logits, hidden_size=8) -> Model:
    """A model whose next-token logits are `target_logits` (V,) after any context.

    Every weight is 0 except the attention output bias (a constant e_0 added to the residual stream) and the
    LM head row 0, so the final-norm hidden state is sqrt(D) e_0 whatever the tokens are.
    """
    V = len(target_logits)
    cfg = ModelConfig(vocab_size=V, hidden_size=hidden_size, intermediate_size=16, num_layers=2, num_heads=2,
                      num_kv_heads=1, o_bias=True)
    params = jax.tree.map(jnp.zeros_like, init_model(cfg, 0).params)
    params["final_norm"] = jnp.ones_like(params["final_norm"])
    params["layers"]["bo"] = params["layers"]["bo"].at[:, 0].set(1.0)
    params["lm_head"] = params["lm_head"].at[0].set(jnp.asarray(target_logits, jnp.float32) / hidden_size ** 0.5)
    return Model(cfg, params)
