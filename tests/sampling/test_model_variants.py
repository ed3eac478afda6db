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
