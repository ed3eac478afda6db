"""Speculative decoding: greedy gives the target's own tokens, sampling follows the target's distribution exactly."""
import dataclasses

import jax
import numpy as np
import pytest

from rlpt.models import Model, init_model
from rlpt.sampling import engine, generate
from rlpt.sampling.speculative import self_draft, speculative_generate
from tests.sampling.helpers import PROMPTS, TINY, fixed_logits_model, full_logits, log_softmax, tiny_model


@pytest.fixture(scope="module")
def draft():
    """A 1-layer draft with other random weights: it disagrees with the target often."""
    return init_model(dataclasses.replace(TINY, num_layers=1), seed=1)


def test_greedy_gives_the_targets_tokens_and_logprobs(draft):
    target = tiny_model()
    plain = generate(target, PROMPTS, [9, 20, 3, 14, 20], temperature=0.0, n=2, stop_ids=(5, 17))
    spec = speculative_generate(target, draft, PROMPTS, [9, 20, 3, 14, 20], temperature=0.0, n=2, k=3,
                                stop_ids=(5, 17))
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    np.testing.assert_array_equal(spec.lengths, plain.lengths)
    assert spec.finish_reason == plain.finish_reason
    np.testing.assert_allclose(spec.logprobs, plain.logprobs, atol=2e-5)
    assert 0 < spec.accepted < spec.proposed  # the draft was right sometimes and wrong sometimes
    # The target as its own draft: every draft is kept, k + 1 tokens per round.
    own = speculative_generate(target, target, PROMPTS, 20, temperature=0.0, k=3)
    np.testing.assert_array_equal(own.tokens, generate(target, PROMPTS, 20, temperature=0.0).tokens)
    assert own.acceptance_rate == 1.0 and own.rounds == 5  # 19 tokens after the prefill's, 4 per round


def _chi2(counts, probs):
    """Pearson's statistic over the bins expected at least 5 times (the rest pooled into one bin)."""
    expected = probs * counts.sum()
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep])), int(keep.sum()) - 1


def _chi2_limit(df: int) -> float:
    """The chi-square quantile at 1 - 1e-4 (a false alarm once in 10,000 seeds), Wilson-Hilferty: 1-4% above
    the exact value for df >= 3 (scipy's chi2.ppf)."""
    z = 3.719
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def test_sampling_follows_the_target_when_the_draft_is_far_off():
    """A context-free target p and a draft q far from it: every position's tokens are distributed as p (the
    draft's preferences are removed by the rejection step), with temperature and top-k applied to p."""
    p_logits = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 0.3, 1.5, 0.8], np.float32)
    q_logits = p_logits[::-1].copy() * 2
    target, draft = fixed_logits_model(p_logits), fixed_logits_model(q_logits)
    rows, new = 3000, 5
    spec = speculative_generate(target, draft, [[1, 2]], new, n=rows, k=3, temperature=0.7, seed=3)
    assert (spec.lengths == new).all()
    probs = np.exp(log_softmax(p_logits / 0.7))
    for pos in range(new):
        stat, df = _chi2(np.bincount(spec.tokens[:, pos], minlength=len(p_logits)), probs)
        assert stat < _chi2_limit(df), (pos, stat)
    assert spec.acceptance_rate < 0.6  # the draft really was far off
    # The draft's own distribution, for contrast, is rejected by the same test.
    q_probs = np.exp(log_softmax(q_logits / 0.7))
    stat, df = _chi2(np.bincount(spec.tokens[:, 2], minlength=len(p_logits)), q_probs)
    assert stat > _chi2_limit(df)


def test_second_token_marginal_matches_the_target_with_context():
    """Tokens depend on the context: the second new token's marginal sum_t1 p(t1) p(t2 | t1), computed by
    enumerating t1 with full forwards, matches speculative samples (top-k 6, so the truncated distribution)."""
    cfg = dataclasses.replace(TINY, vocab_size=16, initializer_range=0.5)
    target, draft = init_model(cfg, seed=4), init_model(dataclasses.replace(cfg, num_layers=1), seed=5)
    prompt = [3, 7, 1]

    def truncated(logits):  # top-6 of the raw logits, renormalised (rlpt's TopK keeps ties, none here)
        keep = logits >= np.sort(logits)[-6]
        return np.where(keep, np.exp(log_softmax(np.where(keep, logits, -np.inf))), 0.0)

    p1 = truncated(full_logits(target, prompt)[-1])
    marginal = sum(p1[t] * truncated(full_logits(target, prompt + [t])[-1]) for t in range(16) if p1[t] > 0)
    spec = speculative_generate(target, draft, [prompt], 2, n=4000, k=2, top_k=6, seed=11)
    stat, df = _chi2(np.bincount(spec.tokens[:, 1], minlength=16), marginal)
    assert df >= 5 and stat < _chi2_limit(df), (df, stat)


def test_logprobs_are_the_targets_teacher_forced(draft):
    target = tiny_model()
    spec = speculative_generate(target, draft, PROMPTS[:2], 12, k=4, top_p=0.9, seed=2)
    for r, prompt in enumerate(PROMPTS[:2]):
        n = spec.lengths[r]
        seq = prompt + spec.tokens[r, :n].tolist()
        raw = log_softmax(full_logits(target, seq)[len(prompt) - 1:len(seq) - 1])
        np.testing.assert_allclose(spec.logprobs[r, :n], raw[np.arange(n), spec.tokens[r, :n]], atol=2e-4)
        assert (spec.tokens[r, n:] == 0).all() and (spec.logprobs[r, n:] == 0).all()
        assert (spec.sampling_logprobs[r, :n] >= spec.logprobs[r, :n] - 1e-4).all()  # top-p renormalises upward


def test_same_seed_same_tokens_and_a_row_is_independent_of_its_batch(draft):
    target = tiny_model()
    a = speculative_generate(target, draft, PROMPTS, 10, k=3, seed=7)
    b = speculative_generate(target, draft, PROMPTS, 10, k=3, seed=7)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    # Rows 2..4 alone, with their global row ids: the same draws (draws are keyed by row id and token index).
    c = speculative_generate(target, draft, PROMPTS[2:], 10, k=3, seed=7, row_offset=2)
    np.testing.assert_array_equal(c.tokens, a.tokens[2:])


def test_a_draft_with_another_vocabulary_is_refused():
    target = tiny_model()
    other = init_model(dataclasses.replace(TINY, vocab_size=80, num_layers=1), seed=0)
    with pytest.raises(ValueError, match="vocab_size 80 != target vocab_size 64"):
        speculative_generate(target, other, PROMPTS, 4)
    with pytest.raises(ValueError, match="k=0"):
        speculative_generate(target, target, PROMPTS, 4, k=0)


def test_self_draft_from_the_targets_first_layers():
    """A LayerSkip-style draft (the target's first layer, its norm and head) is a valid draft."""
    target = tiny_model()
    layers = jax.tree.map(lambda a: a[:1], target.params["layers"])
    draft = Model(dataclasses.replace(TINY, num_layers=1), dict(target.params, layers=layers))
    spec = speculative_generate(target, draft, PROMPTS, 16, temperature=0.0, k=4)
    np.testing.assert_array_equal(spec.tokens, generate(target, PROMPTS, 16, temperature=0.0).tokens)


@pytest.mark.parametrize("ops", ["xla_cpu", "reference"])
def test_an_int_draft_is_a_self_draft_that_shares_the_targets_weights_and_cache(ops):
    """draft=1: the target's first layer with its head, decoded from the target's weights (no copy), writing that
    layer's K/V into the target's own cache, with the verification running only the layers after it (LayerSkip's
    self-speculation). It draws exactly what the same layers given as a separate Model (its own cache and
    prefill, a full verification forward) draw, on both ops backends (XLA:CPU's decode layout, the params)."""
    target = tiny_model()
    target = Model(dataclasses.replace(target.config, ops=ops), target.params)
    layers = jax.tree.map(lambda a: a[:1], target.params["layers"])
    copy = Model(dataclasses.replace(target.config, num_layers=1), dict(target.params, layers=layers))
    shared = speculative_generate(target, 1, PROMPTS, 12, k=3, n=2, temperature=0.8, seed=5)
    apart = speculative_generate(target, copy, PROMPTS, 12, k=3, n=2, temperature=0.8, seed=5)
    np.testing.assert_array_equal(shared.tokens, apart.tokens)
    np.testing.assert_allclose(shared.logprobs, apart.logprobs, atol=1e-5)
    assert (shared.proposed, shared.accepted, shared.rounds) == (apart.proposed, apart.accepted, apart.rounds)
    assert 0 < shared.accepted < shared.proposed
    own_cache = speculative_generate(target, 1, PROMPTS, 12, k=3, n=2, temperature=0.8, seed=5, shared_cache=False)
    np.testing.assert_array_equal(own_cache.tokens, shared.tokens)  # the ablation: own cache, full verification
    # Greedy with stop ids and per-prompt limits: the target's own tokens, the last round's writes included.
    plain = generate(target, PROMPTS, [9, 20, 3, 14, 20], temperature=0.0, n=2, stop_ids=(5, 17))
    greedy = speculative_generate(target, 1, PROMPTS, [9, 20, 3, 14, 20], temperature=0.0, n=2, k=4,
                                  stop_ids=(5, 17))
    np.testing.assert_array_equal(greedy.tokens, plain.tokens)
    np.testing.assert_array_equal(greedy.lengths, plain.lengths)
    np.testing.assert_allclose(greedy.logprobs, plain.logprobs, atol=2e-5)
    model, weights = self_draft(target, 1)
    assert model.config.num_layers == 1 and self_draft(target, 1)[0] is model  # built once per weight version
    full = engine.decode_weights(target)
    if ops == "xla_cpu":  # XLA:CPU's decode layout: the draft's layers are the target's arrays
        assert weights.weights["layers"][0]["wqkv"] is full.weights["layers"][0]["wqkv"]
        assert weights.weights["head"] is full.weights["head"] and len(weights.weights["layers"]) == 1
    for bad in (0, TINY.num_layers, True):
        with pytest.raises(ValueError, match=f"draft={bad!r}: a self-draft takes 1..{TINY.num_layers - 1}"):
            speculative_generate(target, bad, PROMPTS, 4)


def test_a_self_draft_verification_equals_the_targets_full_forward():
    """The shared path's pieces: the draft's steps (the first layer, token by token) then the verification (the
    other layers on their hidden states) give the logits and the cache of the target's one (k + 1)-token forward,
    up to float summation order."""
    from rlpt.sampling import speculative as sp
    from rlpt.sampling.generate import check_request, pad_prompts, plan_cache, seed_key

    target = tiny_model()
    cfg, k = target.config, 3
    req = check_request(cfg, PROMPTS, 10, 1, 1.0, None, None, None, ())
    T, cache_len = plan_cache(req.prompts, req.width + k + 1, None)
    tokens, lengths = pad_prompts(req.prompts, T)
    state = engine.prefill(target.params, tokens, lengths, req.limits, seed_key(0), np.arange(len(PROMPTS),
                           dtype=np.uint32), cfg=cfg, methods=req.methods, stop_ids=(), n=1, cache_len=cache_len,
                           width=req.width)
    weights = sp._verify_weights(target)
    drafts, _, xs, cache = sp._self_draft_round(weights, cfg, 1, req.methods, state, k)
    raw, cache = sp._rest_logits(weights, cfg, 1, state, xs, cache)
    ref, ref_cache = sp._target_logits(weights, cfg, state, drafts)
    np.testing.assert_allclose(raw, ref, atol=1e-4)
    for a, b in zip(jax.tree.leaves(cache), jax.tree.leaves(ref_cache), strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=1e-4)
