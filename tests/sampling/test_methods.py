"""Sampling methods on fixed logits: exact kept sets, and chi-square of empirical frequencies."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rlpt.sampling import MinP, Temperature, TopK, TopP, apply_methods, make_methods, row_uniforms, sample
from rlpt.sampling.methods import categorical
from tests.sampling.helpers import log_softmax

LOGITS = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0], np.float32)


def reference_probs(logits, temperature=1.0, top_k=None, top_p=None, min_p=None):
    """HF order: temperature, top-k, top-p (smallest prefix reaching top_p), min-p; renormalised."""
    z = np.asarray(logits, np.float64) / temperature
    keep = np.ones(len(z), bool)
    if top_k is not None:
        keep &= z >= np.sort(z)[-top_k]
    if top_p is not None:
        p = np.where(keep, np.exp(z - z[keep].max()), 0)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        n = np.searchsorted(np.cumsum(p[order]), top_p * (1 - 1e-12)) + 1
        keep &= np.isin(np.arange(len(z)), order[:n])
    if min_p is not None:
        p = np.where(keep, np.exp(z - z[keep].max()), 0)
        keep &= p >= min_p * p.max()
    p = np.where(keep, np.exp(z - z.max()), 0)
    return p / p.sum()


def draw(methods, logits, n=40_000, seed=0):
    batch = jnp.broadcast_to(jnp.asarray(logits), (n, len(logits)))
    uniforms = jax.random.uniform(jax.random.key(seed), (n,))
    tokens, sampling_lp, raw_lp = jax.jit(sample, static_argnums=0)(methods, batch, uniforms)
    return np.asarray(tokens), np.asarray(sampling_lp), np.asarray(raw_lp)


SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.6),
    dict(temperature=1.0, top_k=3),
    dict(temperature=1.0, top_p=0.8),
    dict(temperature=1.0, min_p=0.2),
    dict(temperature=1.7, top_k=5, top_p=0.9),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_empirical_frequencies_match_truncated_distribution(setting):
    expected = reference_probs(LOGITS, **setting)
    tokens, sampling_lp, raw_lp = draw(make_methods(**setting), LOGITS)
    counts = np.bincount(tokens, minlength=len(LOGITS))
    kept = expected > 0
    assert counts[~kept].sum() == 0, f"drew excluded tokens: {counts}"
    chi2 = stats.chisquare(counts[kept], expected[kept] * len(tokens))
    assert chi2.pvalue > 1e-3, (counts, expected * len(tokens))
    np.testing.assert_allclose(sampling_lp, np.log(expected[tokens]), atol=1e-5)
    np.testing.assert_allclose(raw_lp, log_softmax(LOGITS)[tokens], atol=1e-5)


def test_greedy_takes_argmax_with_zero_sampling_logprob():
    tokens, sampling_lp, raw_lp = draw(make_methods(temperature=0.0), LOGITS, n=4)
    assert (tokens == 0).all() and (sampling_lp == 0).all()
    np.testing.assert_allclose(raw_lp, log_softmax(LOGITS)[0], atol=1e-6)


def test_kept_sets_match_sorting_on_random_logits():
    x = np.array(jax.random.normal(jax.random.key(3), (16, 1000)) * 3)
    x[0, :10] = 5.0  # ties at the k-th value: all tied tokens are kept
    for method, ref in [
        (TopK(1), lambda r: r >= np.sort(r)[-1]),
        (TopK(37), lambda r: r >= np.sort(r)[-37]),
        (TopK(5000), lambda r: np.ones_like(r, bool)),
        (MinP(0.05), lambda r: np.exp(r - r.max()) >= 0.05),
    ]:
        got = np.asarray(method(jnp.asarray(x))) > -np.inf
        for b in range(len(x)):
            assert (got[b] == ref(x[b])).all(), (method, b)
    for top_p in (0.05, 0.5, 0.9, 0.999):
        got = np.asarray(TopP(top_p)(jnp.asarray(x))) > -np.inf
        for b in range(len(x)):
            keep = reference_probs(x[b], top_p=top_p) > 0
            assert (got[b] == keep).all(), (top_p, b, got[b].sum(), keep.sum())


def test_apply_methods_chain_order_and_noop_settings():
    assert make_methods(1.0, None, 1.0, 0.0) == ()
    assert make_methods(0.0, 5, 0.5) == (make_methods(0.0)[0],)
    chain = make_methods(0.5, 3, 0.9, 0.1)
    assert [type(m) for m in chain] == [Temperature, TopK, TopP, MinP]
    out = np.asarray(apply_methods(chain, jnp.asarray(LOGITS[None])))[0]
    np.testing.assert_array_equal(out > -np.inf, reference_probs(LOGITS, 0.5, 3, 0.9, 0.1) > 0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-0.1), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_k=2.5), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(min_p=-0.1), "min_p"),
])
def test_invalid_parameters_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_methods(**kwargs)


def test_row_uniforms_are_uniform_and_independent_of_batch_layout():
    key = jax.random.key_data(jax.random.key(0))
    rows = np.arange(20_000, dtype=np.uint32)
    u = np.asarray(row_uniforms(key, rows, np.zeros_like(rows)))
    assert stats.kstest(u, "uniform").pvalue > 1e-3 and (u >= 0).all() and (u < 1).all()
    perm = np.random.default_rng(0).permutation(len(rows))
    np.testing.assert_array_equal(np.asarray(row_uniforms(key, rows[perm], np.zeros_like(rows))), u[perm])
    nxt = np.asarray(row_uniforms(key, rows, np.ones_like(rows)))
    assert abs(np.corrcoef(u, nxt)[0, 1]) < 0.05


def test_categorical_takes_unnormalised_weights():
    """categorical draws from weights in proportion (their scale does not matter) and never a zero weight."""
    w = np.array(jnp.exp(jax.random.normal(jax.random.key(5), (8, 1000)) * 2))
    w[:, ::3] = 0.0
    u = jax.random.uniform(jax.random.key(6), (200, 8))
    a = np.stack([np.asarray(categorical(jnp.asarray(w), ui)) for ui in u])
    b = np.stack([np.asarray(categorical(jnp.asarray(w * 37.5), ui)) for ui in u])
    assert (a % 3 != 0).all() and (b % 3 != 0).all()
    assert (a == b).mean() > 0.995
    # The inverse CDF by hand: the first token whose cumulative weight reaches (1 - u) * total.
    cdf = np.cumsum(w.astype(np.float64), axis=1)
    ref = np.stack([[np.searchsorted(cdf[r], (1 - float(ui[r])) * cdf[r, -1]) for r in range(8)] for ui in u])
    assert (a == ref).mean() > 0.995
