"""List domains ('sort 3 1 2:' -> '1 2 3'): tier t uses t+2 items; values grow from digits to 3 digits."""

import statistics

from rlpt.tasks.native.common import domain


def _items(rng, t, distinct=False, n=None):
    n = n or t + 2
    hi = 9 if t <= 2 else 10 ** (t - 1) - 1
    if distinct:
        return rng.sample(range(hi + 1), n)
    return [rng.randint(0, hi) for _ in range(n)]


def _show(xs):
    return " ".join(map(str, xs))


def _sort(rng, t):
    xs = _items(rng, t)
    return f"sort {_show(xs)}:", {"answer": _show(sorted(xs))}


def _sort_desc(rng, t):
    xs = _items(rng, t)
    return f"rsort {_show(xs)}:", {"answer": _show(sorted(xs, reverse=True))}


def _min(rng, t):
    xs = _items(rng, t)
    return f"min {_show(xs)}:", {"answer": str(min(xs))}


def _max(rng, t):
    xs = _items(rng, t)
    return f"max {_show(xs)}:", {"answer": str(max(xs))}


def _index(rng, t):
    xs = _items(rng, t, distinct=True)
    x = rng.choice(xs)
    return f"find {x} in {_show(xs)}:", {"answer": str(xs.index(x))}


def _median(rng, t):
    xs = _items(rng, t, n=2 * t + 1)
    return f"median {_show(xs)}:", {"answer": str(statistics.median(xs))}


def _unique(rng, t):
    xs = _items(rng, t, n=t + 3)
    xs[rng.randrange(1, len(xs))] = xs[rng.randrange(len(xs) - 1)]  # at least one repeat
    return f"uniq {_show(xs)}:", {"answer": _show(dict.fromkeys(xs))}


def _reverse(rng, t):
    xs = _items(rng, t)
    return f"rev {_show(xs)}:", {"answer": _show(xs[::-1])}


def _second(rng, t):
    xs = _items(rng, t, distinct=True, n=t + 2)
    return f"second largest {_show(xs)}:", {"answer": str(sorted(xs)[-2])}


def _count_gt(rng, t):
    xs = _items(rng, t, n=t + 3)
    k = rng.choice(xs)
    return f"count >{k} in {_show(xs)}:", {"answer": str(sum(x > k for x in xs))}


def _sum(rng, t):
    xs = _items(rng, t)
    return f"sum {_show(xs)}:", {"answer": str(sum(xs))}


def _argmax(rng, t):
    xs = _items(rng, t, distinct=True)
    return f"argmax {_show(xs)}:", {"answer": str(xs.index(max(xs)))}


def _merge(rng, t):
    a, b = sorted(_items(rng, t, n=t + 1)), sorted(_items(rng, t, n=t + 1))
    return f"merge {_show(a)} | {_show(b)}:", {"answer": _show(sorted(a + b))}


def _kth(rng, t):
    xs = _items(rng, t, distinct=True, n=t + 3)
    k = rng.randint(1, len(xs))
    return f"smallest #{k} of {_show(xs)}:", {"answer": str(sorted(xs)[k - 1])}


def domains():
    tl, num = "token_list", "numeric"
    return [
        domain("list/sort", _sort, tl, "sort ascending"),
        domain("list/sort_desc", _sort_desc, tl, "sort descending"),
        domain("list/min", _min, num, "minimum"),
        domain("list/max", _max, num, "maximum"),
        domain("list/index", _index, num, "0-based position of a value (search)"),
        domain("list/median", _median, num, "median of 2*tier+1 values"),
        domain("list/unique", _unique, tl, "drop repeats, keep first occurrences in order"),
        domain("list/reverse", _reverse, tl, "reverse the list"),
        domain("list/second_largest", _second, num, "second largest of distinct values"),
        domain("list/count_greater", _count_gt, num, "how many values exceed k"),
        domain("list/sum", _sum, num, "sum of the list"),
        domain("list/argmax", _argmax, num, "0-based position of the maximum"),
        domain("list/merge", _merge, tl, "merge two sorted lists"),
        domain("list/kth_smallest", _kth, num, "k-th smallest value"),
    ]
