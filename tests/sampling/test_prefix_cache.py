"""PrefixCache: a shared prompt prefix computed once and copied into every row gives what full prefills give."""
import dataclasses

import jax
import numpy as np
import pytest

from rlpt.models import Model
from rlpt.sampling import PrefixCache, common_prefix, continue_generation, generate
from tests.sampling.helpers import tiny_model

PREAMBLE = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28]  # a "system prompt"
QUESTIONS = [[1, 2, 3], [5, 9], [40, 41, 42, 43, 44], [7]]


def test_common_prefix_stops_one_token_short_of_the_shortest_prompt():
    assert common_prefix([[1, 2, 3, 4], [1, 2, 3, 9]]) == [1, 2, 3]
    assert common_prefix([[1, 2, 3], [1, 2, 3, 4]]) == [1, 2]
    assert common_prefix([[5, 2], [1, 2]]) == []
    assert common_prefix([[1, 2, 3]]) == [1, 2]


@pytest.mark.parametrize("kv_cache_dtype", [None, "int8"])
def test_fill_then_hit_equals_full_prefills(kv_cache_dtype):
    model = tiny_model()
    prompts = [PREAMBLE + q for q in QUESTIONS]
    kw = dict(n=2, temperature=0.0, stop_ids=(5,), kv_cache_dtype=kv_cache_dtype, keep_state=False)
    plain = generate(model, prompts, 12, **kw)
    cache = PrefixCache(min_tokens=8)
    filled = generate(model, prompts, 12, prefix_cache=cache, **kw)
    assert (cache.calls, cache.hits, cache.reused_tokens) == (1, 0, len(PREAMBLE) * 3)
    hit = generate(model, [PREAMBLE + [30, 31], PREAMBLE + [2]], 12, prefix_cache=cache, **kw)
    assert (cache.calls, cache.hits) == (2, 1) and cache.reused_tokens == len(PREAMBLE) * 5
    for got, want in ((filled, plain), (hit, generate(model, [PREAMBLE + [30, 31], PREAMBLE + [2]], 12, **kw))):
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.lengths, want.lengths)
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5 if kv_cache_dtype is None else 2e-2)
    assert 0 < cache.reused_fraction < 1 and cache.hit_rate == 0.5


def test_new_weights_start_empty_and_short_prefixes_are_not_stored():
    model = Model(tiny_model().config, tiny_model().params)  # a Model of its own: nothing stored on it yet
    cache = PrefixCache(min_tokens=8)
    prompts = [PREAMBLE + q for q in QUESTIONS]
    generate(model, prompts, 4, prefix_cache=cache)
    assert (cache.calls, cache.hits) == (1, 0)
    other = Model(model.config, jax.tree.map(lambda x: x * 1.01, model.params))  # the next policy version
    generate(other, prompts, 4, prefix_cache=cache)
    assert cache.hits == 0
    generate(model, prompts, 4, prefix_cache=cache)  # the first version's prefix is still on its model
    assert cache.hits == 1
    again = PrefixCache(min_tokens=32)  # prefixes live on the model: another PrefixCache finds them too
    generate(model, prompts, 4, prefix_cache=again)
    assert again.hits == 1
    short = PrefixCache(min_tokens=32)
    generate(Model(model.config, model.params), prompts, 4, prefix_cache=short)
    assert short.reused_tokens == 0 and short.hits == 0


def test_sampled_rows_and_continuation_match_without_the_cache():
    model = tiny_model()
    prompts = [PREAMBLE + q for q in QUESTIONS]
    cache = PrefixCache(min_tokens=4)
    a = generate(model, prompts, 6, temperature=1.0, seed=4, max_cache_len=64, prefix_cache=cache)
    b = generate(model, prompts, 6, temperature=1.0, seed=4, max_cache_len=64)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    more = [[3, 4]] * len(prompts)
    ca = continue_generation(model, a, more, 5, temperature=1.0)
    cb = continue_generation(model, b, more, 5, temperature=1.0)
    np.testing.assert_array_equal(ca.tokens, cb.tokens)
    np.testing.assert_allclose(ca.logprobs, cb.logprobs, atol=1e-5)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="min_tokens=0"):
        PrefixCache(min_tokens=0)
    model = tiny_model()
    with pytest.raises(ValueError, match="max_cache_len"):
        generate(model, [PREAMBLE + [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]] * 2, 4, max_cache_len=20,
                 prefix_cache=PrefixCache(min_tokens=4))


def test_rollout_reports_the_prefix_reuse():
    from rlpt.config import compose
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.rollout import single_turn
    from rlpt.tasks import get_domain
    from tests.sampling.helpers import TINY

    tok = builtin_tokenizer()
    model = init_model(dataclasses.replace(TINY, vocab_size=tok.vocab_size), 0)
    tasks = [get_domain("arith/add").generate(s, 1) for s in range(4)]  # prompts share "<bos><|user|>"
    rcfg = dataclasses.replace(compose(["rl.rollout.prefix_cache_min_tokens=2"]).rl.rollout, group_size=2,
                               max_new_tokens=4)
    traj = single_turn.rollout(model, tok, tasks, rcfg, seed=0, version=0)
    assert traj.prefix_stats == {"prefix_hit_rate": 0.0, "prefix_reused_fraction": 2 * 3 / 32, "prefix_calls": 1}
    off = single_turn.rollout(model, tok, tasks, dataclasses.replace(rcfg, prefix_cache_min_tokens=0), seed=0,
                              version=0)
    assert off.prefix_stats is None
    assert (off.response == traj.response).all()
    with pytest.raises(ValueError, match="rl.rollout.refill"):
        single_turn.rollout(model, tok, tasks, dataclasses.replace(rcfg, refill=True), seed=0, version=0)
