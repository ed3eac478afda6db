"""pass@k against the exact combinatorial estimator; bootstrap intervals cover the truth at the nominal rate."""
import math

import numpy as np
import pytest

from rlpt.eval.passk import mean_pass_at_k, pass_at_k
from rlpt.eval.run import aggregate
from rlpt.eval.stats import paired_bootstrap


def exact(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n", [1, 2, 5, 10, 20, 50])
def test_pass_at_k_matches_combinatorial_formula(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(exact(n, c, k), abs=1e-12), (n, c, k)


def test_known_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 1, 5) == 1.0  # every 5-subset of 5 holds the correct one
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # C(2,2)/C(4,2) = 1/6
    # large n: C(2000, 100) overflows a float; the product form stays accurate
    n, c, k = 2000, 7, 100
    lg = math.lgamma
    direct = 1 - math.exp(lg(n - c + 1) - lg(n - c - k + 1) - lg(n + 1) + lg(n - k + 1))
    assert pass_at_k(n, c, k) == pytest.approx(direct, rel=1e-9)


def test_pass_at_k_is_the_expected_best_of_k_draw():
    rng = np.random.default_rng(0)
    n, c, k = 12, 3, 4
    pool = np.array([1] * c + [0] * (n - c))
    hits = np.mean([pool[rng.permutation(n)[:k]].max() for _ in range(40_000)])
    assert hits == pytest.approx(pass_at_k(n, c, k), abs=0.01)


def test_pass_at_k_rejects_bad_inputs():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(TypeError):
        pass_at_k(3.0, 1, 1)


def test_aggregate_reports_pass_at_k_from_records():
    rows = [{"passed": True, "n": 4, "c": 2}, {"passed": False, "n": 4, "c": 0}, {"passed": False, "n": 4, "c": 1}]
    agg = aggregate(rows, [1, 2, 4, 8])
    assert agg["pass1"] == pytest.approx(1 / 3)
    assert agg["pass@2"] == pytest.approx(mean_pass_at_k([4, 4, 4], [2, 0, 1], 2))
    assert agg["pass@4"] == pytest.approx(2 / 3)
    assert "pass@8" not in agg  # more than the samples drawn: not estimable


def test_bootstrap_is_seeded_and_flags_clear_differences():
    a = np.r_[np.ones(60), np.zeros(40)]
    b = np.r_[np.ones(90), np.zeros(10)]
    i1, i2 = paired_bootstrap(a, b, seed=3), paired_bootstrap(a, b, seed=3)
    assert i1 == i2
    assert i1.delta == pytest.approx(0.3) and i1.low > 0 and i1.significant
    same = paired_bootstrap(a, a, seed=0)
    assert same.low == same.high == 0.0 and not same.significant


@pytest.mark.parametrize("level", [0.8, 0.95])
def test_bootstrap_interval_covers_the_truth_at_about_the_nominal_rate(level):
    """Paired Bernoulli outcomes with a known population delta (0.1): over 300 simulated evaluations of 200 tasks
    the percentile interval must contain the truth about `level` of the time."""
    rng = np.random.default_rng(1234)
    sims, n, hits = 300, 200, 0
    for s in range(sims):
        skill = rng.random(n)  # per-task difficulty shared by both systems: the pairing matters
        a = (rng.random(n) < 0.3 + 0.4 * skill).astype(float)  # P(a) = 0.5 on average
        b = (rng.random(n) < 0.4 + 0.4 * skill).astype(float)  # P(b) = 0.6: true delta 0.1
        iv = paired_bootstrap(a, b, level=level, resamples=1000, seed=s)
        hits += iv.low <= 0.1 <= iv.high
    coverage = hits / sims
    se = math.sqrt(level * (1 - level) / sims)
    assert abs(coverage - level) < 4 * se + 0.02, f"coverage {coverage:.3f} at nominal {level}"
