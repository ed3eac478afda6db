"""generate(): greedy == full recomputation, exact log-probs, n samples, stops, limits, cache, bad inputs."""
import jax
import numpy as np
import pytest
from scipy import stats

from rlpt.sampling import apply_methods, generate, make_methods
from rlpt.sampling.generate import decode_phases, plan_cache
from tests.sampling.helpers import PROMPTS, fixed_logits_model, log_softmax, teacher_forced, tiny_model


def test_greedy_equals_argmax_of_full_recomputation_at_every_step():
    model = tiny_model()
    out = generate(model, PROMPTS, 12, temperature=0.0)
    assert out.tokens.shape == (len(PROMPTS), 12) and list(out.lengths) == [12] * len(PROMPTS)
    assert out.finish_reason == ["length"] * len(PROMPTS)
    for i, prompt in enumerate(PROMPTS):
        logits = teacher_forced(model, prompt, out.tokens[i])
        np.testing.assert_array_equal(out.tokens[i], logits.argmax(-1), err_msg=f"row {i}")
        ref = log_softmax(logits)[np.arange(12), out.tokens[i]]
        np.testing.assert_allclose(out.logprobs[i], ref, atol=1e-5, rtol=0)
        assert (out.sampling_logprobs[i] == 0).all()


def test_sampled_logprobs_stops_and_prompt_major_groups():
    model = tiny_model()
    setting = dict(temperature=0.8, top_k=20, top_p=0.95)
    stop_ids = (3, 17)
    out = generate(model, PROMPTS, 10, n=3, stop_ids=stop_ids, seed=1, **setting)
    assert out.tokens.shape == (15, 10)
    assert "stop" in out.finish_reason and "length" in out.finish_reason
    chain = make_methods(**setting)
    for r in range(15):
        prompt, L = PROMPTS[r // 3], out.lengths[r]
        new = out.tokens[r, :L]
        logits = teacher_forced(model, prompt, new)
        np.testing.assert_allclose(out.logprobs[r, :L], log_softmax(logits)[np.arange(L), new], atol=1e-5)
        adjusted = np.asarray(apply_methods(chain, logits))
        np.testing.assert_allclose(out.sampling_logprobs[r, :L], log_softmax(adjusted)[np.arange(L), new],
                                   atol=1e-5)
        assert (out.tokens[r, L:] == 0).all() and (out.logprobs[r, L:] == 0).all()
        stops = np.isin(new, stop_ids)
        if out.finish_reason[r] == "stop":
            assert stops[-1] and not stops[:-1].any()
        else:
            assert out.finish_reason[r] == "length" and L == 10 and not stops.any()
    # The n samples of one prompt differ (independent draws from one shared prefill).
    assert not (out.tokens[0] == out.tokens[1]).all() or not (out.tokens[1] == out.tokens[2]).all()
    again = generate(model, PROMPTS, 10, n=3, stop_ids=stop_ids, seed=1, **setting)
    np.testing.assert_array_equal(again.tokens, out.tokens)


def test_n_greedy_samples_repeat_the_single_sample_and_per_row_limits():
    model = tiny_model()
    limits = [3, 12, 1, 7, 5]
    single = generate(model, PROMPTS, limits, temperature=0.0)
    assert list(single.lengths) == limits
    grouped = generate(model, PROMPTS, 12, n=2, temperature=0.0)
    full = generate(model, PROMPTS, 12, temperature=0.0)
    np.testing.assert_array_equal(grouped.tokens, np.repeat(full.tokens, 2, axis=0))
    for i, L in enumerate(limits):
        np.testing.assert_array_equal(single.tokens[i, :L], full.tokens[i, :L])
        assert (single.tokens[i, L:] == 0).all()


def test_cache_full_stops_a_row_and_keeps_its_tokens_exact():
    model = tiny_model()
    out = generate(model, PROMPTS, 12, temperature=0.0, max_cache_len=13)
    full = generate(model, PROMPTS, 12, temperature=0.0)
    for i, prompt in enumerate(PROMPTS):
        # The cache holds the prompt and every generated token but the last, which is never fed back.
        expected = min(12, 13 - len(prompt) + 1)
        assert out.lengths[i] == expected, (i, out.lengths[i])
        assert out.finish_reason[i] == ("length" if expected == 12 else "cache_full")
        np.testing.assert_array_equal(out.tokens[i, :expected], full.tokens[i, :expected])


def test_end_to_end_frequencies_with_fixed_logits():
    target = np.array([1.0, 0.2, -0.5, 2.0, 0.0, -2.0, 0.7, 1.4], np.float32)
    model = fixed_logits_model(target)
    logits = np.asarray(model(np.zeros((1, 1), np.int32)))[0, -1]
    np.testing.assert_allclose(logits, target, atol=1e-4)
    out = generate(model, [[1, 2]], 2, n=6000, temperature=0.9, top_k=5, top_p=0.9, seed=7)
    z = logits / 0.9
    keep = z >= np.sort(z)[-5]
    p = np.where(keep, np.exp(z - z.max()), 0)
    p /= p.sum()
    order = np.argsort(-p)
    keep &= np.isin(np.arange(8), order[:np.searchsorted(np.cumsum(p[order]), 0.9) + 1])
    expected = np.where(keep, p, 0) / np.where(keep, p, 0).sum()
    for col in range(2):
        counts = np.bincount(out.tokens[:, col], minlength=8)
        assert counts[~keep].sum() == 0
        f_exp = expected[keep] * counts.sum()
        assert stats.chisquare(counts[keep], f_exp * counts.sum() / f_exp.sum()).pvalue > 1e-3, counts


@pytest.mark.parametrize("prompts, kwargs, match", [
    ([[1, 2], []], {}, r"prompt_tokens\[1\] is empty"),
    ([], {}, "non-empty"),
    ([[1, 2, 3, 4, 5]], dict(max_cache_len=4), "cache holds 4"),
    ([[1, 64]], {}, "outside"),
    ([[1]], dict(top_p=0.0), "top_p"),
    ([[1]], dict(top_p=1.01), "top_p"),
    ([[1]], dict(temperature=-1.0), "temperature"),
    ([[1]], dict(top_k=0), "top_k"),
    ([[1]], dict(n=0), "n=0"),
    ([[1]], dict(stop_ids=(99,)), "stop_ids"),
])
def test_bad_inputs_raise_clear_errors(prompts, kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate(tiny_model(), prompts, 4, **kwargs)


def test_bad_max_new_tokens():
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        generate(tiny_model(), [[1]], 0)
    with pytest.raises(ValueError, match="one per prompt"):
        generate(tiny_model(), [[1], [2]], [3])


def test_new_params_do_not_recompile():
    model = tiny_model()
    generate(model, PROMPTS, 12, temperature=0.0)
    other = model.with_params(jax.tree.map(lambda x: x * 1.01, model.params))
    from rlpt.sampling import engine
    before = engine.decode._cache_size(), engine.prefill._cache_size()
    generate(other, PROMPTS, 12, temperature=0.0)
    assert (engine.decode._cache_size(), engine.prefill._cache_size()) == before


@pytest.mark.parametrize("longest,width,cache_len,phase", [(32, 128, 161, 32), (11, 24, 41, 2), (20, 100, 133, 32),
                                                           (100, 512, 641, 32), (5, 10, 24, 32), (1, 1, 10, 1)])
def test_decode_phases_cover_every_step_inside_their_windows(longest, width, cache_len, phase):
    phases = decode_phases(longest, width, cache_len, phase)
    assert sum(steps for steps, _ in phases) == width and all(steps > 0 for steps, _ in phases)
    done = 0
    for steps, window in phases:
        # the last slot written by these steps is longest - 1 + done + steps: inside the window
        assert window is None or longest - 1 + done + steps < window < cache_len
        done += steps
    windows = [w for _, w in phases]
    assert windows[-1] is None or len(windows) == 1 or windows == sorted(windows)
    assert decode_phases(longest, width, cache_len, 0) == [(width, None)]


def test_windowed_decoding_matches_recomputation_and_the_unwindowed_decode():
    """decode_phase=2 attends to 16, then 32 slots, then the whole 41-slot cache: greedy tokens are still the
    argmax of full recomputation, and sampled log-probs equal the teacher-forced ones."""
    model = tiny_model()
    assert [w for _, w in decode_phases(11, 24, 41, 2)] == [16, 32, None]
    out = generate(model, PROMPTS, 24, temperature=0.0, decode_phase=2)
    for i, prompt in enumerate(PROMPTS):
        logits = teacher_forced(model, prompt, out.tokens[i])
        np.testing.assert_array_equal(out.tokens[i], logits.argmax(-1), err_msg=f"row {i}")
        np.testing.assert_allclose(out.logprobs[i], log_softmax(logits)[np.arange(24), out.tokens[i]], atol=1e-5)
    sampled = generate(model, PROMPTS, 24, n=2, seed=3, decode_phase=2)
    plain = generate(model, PROMPTS, 24, n=2, seed=3, decode_phase=0)
    np.testing.assert_array_equal(sampled.tokens, plain.tokens)
    np.testing.assert_allclose(sampled.logprobs, plain.logprobs, atol=1e-5)
    for r in range(len(PROMPTS) * 2):
        logits = teacher_forced(model, PROMPTS[r // 2], sampled.tokens[r])
        # 35-token rows: a few log-probs near -4 differ from the teacher-forced ones by ~1e-5 of float noise
        np.testing.assert_allclose(sampled.logprobs[r], log_softmax(logits)[np.arange(24), sampled.tokens[r]],
                                   atol=1e-5, rtol=1e-5)


def test_default_cache_slots_are_a_multiple_of_8():
    """XLA:TPU lays out a (B, KV, S, Dh) cache whose S is not a multiple of 8 with S outside its tile; the decode
    loop then copied the whole cache into its own layout and back at every call (docs/scaling.md)."""
    assert plan_cache([[1] * 5], 12, None) == (8, 24)
    assert plan_cache([[1] * 1000], 3072, None) == (1024, 4104)
    assert plan_cache([[1] * 5], 12, None, prefix=3) == (8, 21)  # 3 + 21 = 24 slots in all
    assert plan_cache([[1] * 5], 12, 13) == (8, 14)  # an explicit max_cache_len is kept exactly


def test_sampling_params_passed_whole_equal_the_keywords():
    """SamplingParams (#38): one frozen value for temperature / top_k / top_p / min_p, checked when built; passed as
    `sampling=` it replaces the four keywords and samples the same tokens."""
    from rlpt.sampling import SamplingParams

    model = tiny_model()
    setting = dict(temperature=0.8, top_k=20, top_p=0.95)
    a = generate(model, PROMPTS, 6, n=2, seed=3, keep_state=False, **setting)
    b = generate(model, PROMPTS, 6, n=2, seed=3, keep_state=False, sampling=SamplingParams(**setting))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.sampling_logprobs, b.sampling_logprobs)
    with pytest.raises(ValueError, match="top_p=1.5"):
        SamplingParams(top_p=1.5)
    with pytest.raises(TypeError, match="expected a rlpt.sampling.SamplingParams"):
        generate(model, PROMPTS, 2, sampling={"temperature": 0.0})
