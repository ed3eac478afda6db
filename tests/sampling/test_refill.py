"""Slot refill gives every prompt the same rows as one plain batch."""
import numpy as np

from rlpt.sampling import generate, generate_refill
from tests.sampling.helpers import PROMPTS, tiny_model

MANY = PROMPTS + [[p % 64 for p in range(i, i + 3 + i % 6)] for i in range(7)]


def test_refill_equals_plain_batch_greedy():
    model = tiny_model()
    limits = [2, 12, 5, 1, 9, 3, 12, 7, 4, 11, 6, 8]
    plain = generate(model, MANY, limits, temperature=0.0, stop_ids=(3, 40))
    refill = generate_refill(model, MANY, limits, slots=4, temperature=0.0, stop_ids=(3, 40))
    np.testing.assert_array_equal(refill.tokens, plain.tokens)
    np.testing.assert_array_equal(refill.lengths, plain.lengths)
    np.testing.assert_allclose(refill.logprobs, plain.logprobs, atol=1e-5)
    assert refill.finish_reason == plain.finish_reason


def test_refill_sampling_uses_per_row_streams():
    model = tiny_model()
    plain = generate(model, MANY[:6], 8, n=2, temperature=1.0, seed=5)
    refill = generate_refill(model, MANY[:6], 8, n=2, slots=3, temperature=1.0, seed=5)
    np.testing.assert_array_equal(refill.tokens, plain.tokens)
    np.testing.assert_allclose(refill.logprobs, plain.logprobs, atol=1e-5)
