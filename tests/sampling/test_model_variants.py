"""The cached decode path is exact for every architecture flag: greedy == argmax of full recomputation."""
import dataclasses

import numpy as np
import pytest

from rlpt.models import init_model
from rlpt.sampling import generate
from tests.sampling.helpers import PROMPTS, TINY, log_softmax, teacher_forced

VARIANTS = {
    "biases_untied": dict(qkv_bias=True, o_bias=True, mlp_bias=True, tie_embeddings=False),
    "qk_norm_tied_mqa": dict(family="qwen3", qk_norm=True, tie_embeddings=True, num_kv_heads=1),
    "sliding_window": dict(sliding_window=4),
    "unscanned_no_gqa": dict(scan_layers=False, num_kv_heads=4),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_greedy_and_logprobs_match_recomputation(name):
    model = init_model(dataclasses.replace(TINY, **VARIANTS[name]), seed=1)
    if name == "biases_untied":  # zero-initialised biases would test nothing
        rng = np.random.default_rng(0)
        layers = {k: (v + rng.normal(0, 0.3, v.shape).astype(v.dtype) if k.startswith("b") else v)
                  for k, v in model.params["layers"].items()}
        model = model.with_params(dict(model.params, layers=layers))
    out = generate(model, PROMPTS, 9, temperature=0.0)
    for i, prompt in enumerate(PROMPTS):
        logits = teacher_forced(model, prompt, out.tokens[i])
        np.testing.assert_array_equal(out.tokens[i], logits.argmax(-1), err_msg=f"{name} row {i}")
        np.testing.assert_allclose(out.logprobs[i], log_softmax(logits)[np.arange(9), out.tokens[i]], atol=1e-5,
                                   rtol=0, err_msg=f"{name} row {i}")


def test_bf16_cache_is_stored_as_bits_and_decodes_like_recomputation():
    """A bf16 model's KV cache holds uint16 bits (XLA:CPU would upcast a bf16 scatter over the whole cache per
    token); the decode must still read back exactly what a full bf16 forward computes."""
    import jax.numpy as jnp

    from rlpt.models.ops.xla_cpu import cache_load as _cache_load
    from rlpt.models.ops.xla_cpu import cache_write as _cache_write
    from rlpt.models.transformer import init_cache

    cfg = dataclasses.replace(TINY, compute_dtype="bfloat16")
    cache = init_cache(cfg, 2, 6)
    assert cache["k"][0].dtype == jnp.uint16
    new = jnp.asarray(np.random.default_rng(0).normal(size=(2, 2, 1, 8)), jnp.bfloat16)
    out = _cache_load(_cache_write(cache["k"][0][..., :8], new, jnp.array([1, 4])), jnp.bfloat16)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out[0, :, 1:2], np.float32), np.asarray(new[0], np.float32))
    np.testing.assert_array_equal(np.asarray(out[1, :, 4:5], np.float32), np.asarray(new[1], np.float32))
    assert float(jnp.abs(out[0, :, [0, 2, 3, 4, 5]].astype(jnp.float32)).sum()) == 0.0

    model = init_model(cfg, seed=1)
    out = generate(model, PROMPTS, 9, temperature=0.0)
    for i, prompt in enumerate(PROMPTS):
        logits = teacher_forced(model, prompt, out.tokens[i])  # the full forward, also in bf16 compute
        lp = log_softmax(logits)
        # bf16 rounding of logits of a few units: the two paths sum in different orders (~0.1 apart at most).
        np.testing.assert_allclose(out.logprobs[i], lp[np.arange(9), out.tokens[i]], atol=0.15, rtol=0,
                                   err_msg=f"row {i}")
        # Greedy picks the full forward's argmax wherever bf16 rounding cannot swap the top two.
        top2 = np.sort(lp, -1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 0.1
        np.testing.assert_array_equal(out.tokens[i][clear], lp.argmax(-1)[clear], err_msg=f"row {i}")
