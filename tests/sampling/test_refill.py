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


def test_windowed_refill_equals_plain_batch(monkeypatch):
    """decode_phase=2: decode calls attend to 16 of the 29 cache slots while the longest live row allows it, rows
    being refilled at other indices; the rows are still those of one unwindowed plain batch."""
    from rlpt.sampling import engine
    from rlpt.sampling.generate import next_window

    assert next_window(5, 29, 2) == (8, 3) and next_window(14, 29, 2) == (16, 2)
    assert next_window(20, 29, 2) == (None, None) and next_window(3, 29, 0) == (None, None)
    windows, decode = [], engine.decode
    monkeypatch.setattr(engine, "decode", lambda *a, window=None, **kw: windows.append(window) or decode(
        *a, window=window, **kw))
    model = tiny_model()
    limits = [2, 12, 5, 1, 9, 3, 12, 7, 4, 11, 6, 8]
    plain = generate(model, MANY, limits, temperature=0.0, stop_ids=(3, 40), decode_phase=0)
    windows.clear()
    refill = generate_refill(model, MANY, limits, slots=4, temperature=0.0, stop_ids=(3, 40), decode_phase=2)
    assert windows.count(16) >= 3 and None in windows, windows
    np.testing.assert_array_equal(refill.tokens, plain.tokens)
    np.testing.assert_array_equal(refill.lengths, plain.lengths)
    np.testing.assert_allclose(refill.logprobs, plain.logprobs, atol=1e-5)
    assert refill.finish_reason == plain.finish_reason
    sampled = generate_refill(model, MANY[:6], 8, n=2, slots=3, temperature=1.0, seed=5, decode_phase=2)
    plain = generate(model, MANY[:6], 8, n=2, temperature=1.0, seed=5, decode_phase=0)
    np.testing.assert_array_equal(sampled.tokens, plain.tokens)
    np.testing.assert_allclose(sampled.logprobs, plain.logprobs, atol=1e-5)
