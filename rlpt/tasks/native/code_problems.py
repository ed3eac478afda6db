"""Parameterised Python problems for the code domains: spec, reference source, input draws, planted bugs.

Each family is `make(rng) -> Problem`; the tier of a family is its key in FAMILIES. Reference sources are
our own code and run in-process only at generation time, to compute the expected outputs.
"""

import dataclasses
import string


@dataclasses.dataclass(frozen=True)
class Problem:
    entry: str
    spec: str
    source: str
    inputs: list  # list of argument tuples
    bugs: list  # (old, new) substitutions, each turning the source into a plausible wrong program


def _ints(rng, n, lo=-9, hi=20):
    return [rng.randint(lo, hi) for _ in range(n)]


def _lists(rng, count, lo=-9, hi=20, min_len=0, max_len=7):
    return [(_ints(rng, rng.randint(min_len, max_len), lo, hi),) for _ in range(count)]


def _strs(rng, count, alphabet=string.ascii_lowercase, max_len=9):
    return [("".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len))),) for _ in range(count)]


def add_k(rng):
    k = rng.randint(2, 99)
    return Problem(
        "add_k",
        f"add_k(x: int) -> int: return x plus {k}.",
        f"def add_k(x):\n    return x + {k}\n",
        [(x,) for x in _ints(rng, 6, -50, 50)],
        [(f"x + {k}", f"x + {k + 1}"), (f"x + {k}", f"x - {k}")],
    )


def count_char(rng):
    c = rng.choice(string.ascii_lowercase)
    pool = c + "".join(rng.sample(string.ascii_lowercase, 3))
    return Problem(
        "count_char",
        f"count_char(s: str) -> int: how many times '{c}' occurs in s.",
        f"def count_char(s):\n    n = 0\n    for ch in s:\n        if ch == '{c}':\n            n += 1\n    return n\n",
        _strs(rng, 6, pool) + [("",), (c + c,)],
        [("n += 1", "n = 1"), (f"ch == '{c}'", f"ch != '{c}'")],
    )


def is_multiple(rng):
    k = rng.randint(2, 9)
    return Problem(
        "is_multiple",
        f"is_multiple(n: int) -> bool: True iff n is divisible by {k}.",
        f"def is_multiple(n):\n    return n % {k} == 0\n",
        [(x,) for x in _ints(rng, 5, -30, 60)] + [(0,), (k,), (k + 1,)],
        [("== 0", "== 1"), (f"% {k}", f"// {k}")],
    )


def largest(rng):
    return Problem(
        "largest",
        "largest(xs: list[int]) -> int: the largest element of the non-empty list xs.",
        "def largest(xs):\n    best = xs[0]\n    for x in xs[1:]:\n        if x > best:\n"
        "            best = x\n    return best\n",
        _lists(rng, 6, min_len=1) + [([-5, -2, -9],)],
        [("x > best", "x < best"), ("xs[1:]", "xs[2:]")],
    )


def sum_above(rng):
    k = rng.randint(0, 9)
    return Problem(
        "sum_above",
        f"sum_above(xs: list[int]) -> int: the sum of the elements greater than {k}.",
        f"def sum_above(xs):\n    return sum(x for x in xs if x > {k})\n",
        _lists(rng, 6) + [([k, k + 1],)],
        [(f"x > {k}", f"x >= {k}"), ("sum(x", "sum(1")],
    )


def scale_shift(rng):
    a, b = rng.randint(2, 9), rng.randint(-9, 9)
    return Problem(
        "scale_shift",
        f"scale_shift(xs: list[int]) -> list[int]: each x becomes {a}*x + ({b}).",
        f"def scale_shift(xs):\n    return [{a} * x + ({b}) for x in xs]\n",
        _lists(rng, 6),
        [(f"{a} * x + ({b})", f"{a} * (x + ({b}))"), (f"{a} * x", f"{a + 1} * x")],
    )


def count_vowels(rng):
    return Problem(
        "count_vowels",
        "count_vowels(s: str) -> int: the number of vowels (aeiou, either case).",
        "def count_vowels(s):\n    return sum(1 for ch in s.lower() if ch in 'aeiou')\n",
        _strs(rng, 6, "abeiouxyzAEI", 12),
        [("s.lower()", "s"), ("'aeiou'", "'aei'")],
    )


def reverse_words(rng):
    words = "red sun map ox tree bird cold ink".split()
    inputs = [(" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))),) for _ in range(6)]
    return Problem(
        "reverse_words",
        "reverse_words(s: str) -> str: the words of s (single spaces) in reverse order, joined by single spaces.",
        "def reverse_words(s):\n    return ' '.join(s.split()[::-1])\n",
        inputs,
        [("[::-1]", "[1:][::-1]"), ("s.split()[::-1]", "s[::-1].split()")],
    )


def running_max(rng):
    return Problem(
        "running_max",
        "running_max(xs: list[int]) -> list[int]: element i is max(xs[:i+1]).",
        "def running_max(xs):\n    out = []\n    for x in xs:\n        out.append(x if not out else "
        "max(out[-1], x))\n    return out\n",
        _lists(rng, 6),
        [("max(out[-1], x)", "min(out[-1], x)"), ("max(out[-1], x)", "max(out[0], x)")],
    )


def rle(rng):
    return Problem(
        "rle",
        "rle(s: str) -> str: run-length encoding, each run as letter then count ('aaab' -> 'a3b1').",
        "def rle(s):\n    out = ''\n    i = 0\n    while i < len(s):\n        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
        "        out += s[i] + str(j - i)\n        i = j\n    return out\n",
        _strs(rng, 6, "aab", 10),
        [("str(j - i)", "str(j - i - 1)"), ("i = j\n", "i = j + 1\n")],
    )


def rising_indices(rng):
    return Problem(
        "rising_indices",
        "rising_indices(xs: list[int]) -> list[int]: every i >= 1 with xs[i] > xs[i-1], ascending.",
        "def rising_indices(xs):\n    return [i for i in range(1, len(xs)) if xs[i] > xs[i - 1]]\n",
        _lists(rng, 6, 0, 9),
        [("range(1,", "range(2,"), ("xs[i] > xs[i - 1]", "xs[i] >= xs[i - 1]")],
    )


def caesar(rng):
    k = rng.randint(1, 25)
    return Problem(
        "caesar",
        f"caesar(s: str) -> str: shift each lowercase letter {k} places forward "
        "(z wraps to a); other characters unchanged.",
        "def caesar(s):\n    return ''.join(chr((ord(c) - 97 + " + str(k) + ") % 26 + 97) "
        "if 'a' <= c <= 'z' else c for c in s)\n",
        _strs(rng, 6, "abxyz -", 10),
        [("% 26", "% 25"), (f"+ {k})", f"+ {k + 1})")],
    )


def second_largest(rng):
    return Problem(
        "second_largest",
        "second_largest(xs: list[int]) -> int | None: the second largest "
        "distinct value, or None if there are fewer than two distinct values.",
        "def second_largest(xs):\n    vals = sorted(set(xs))\n    return vals[-2] if len(vals) >= 2 else None\n",
        _lists(rng, 6, 0, 6) + [([3, 3],), ([],)],
        [("sorted(set(xs))", "sorted(xs)"), ("vals[-2]", "vals[1]")],
    )


def merge_sorted(rng):
    inputs = [(sorted(_ints(rng, rng.randint(0, 5))), sorted(_ints(rng, rng.randint(0, 5)))) for _ in range(6)]
    return Problem(
        "merge_sorted",
        "merge_sorted(a: list[int], b: list[int]) -> list[int]: merge two "
        "ascending lists into one ascending list, keeping duplicates.",
        "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n"
        "        else:\n            out.append(b[j])\n            j += 1\n"
        "    return out + a[i:] + b[j:]\n",
        inputs,
        [("out + a[i:] + b[j:]", "out + a[i:]"), ("a[i] <= b[j]", "a[i] >= b[j]")],
    )


def fib_like(rng):
    a, b = rng.randint(0, 5), rng.randint(1, 5)
    return Problem(
        "fib_like",
        f"fib_like(n: int) -> int: f(0)={a}, f(1)={b}, f(n)=f(n-1)+f(n-2).",
        f"def fib_like(n):\n    x, y = {a}, {b}\n    for _ in range(n):\n        x, y = y, x + y\n    return x\n",
        [(n,) for n in rng.sample(range(0, 25), 6)] + [(0,), (1,)],
        [("range(n)", "range(n - 1)"), ("x, y = y, x + y", "x, y = y, x + y + 1")],
    )


def digit_power_sum(rng):
    p = rng.randint(2, 4)
    return Problem(
        "digit_power_sum",
        f"digit_power_sum(n: int) -> int: the sum of d**{p} over the decimal digits d of n >= 0.",
        f"def digit_power_sum(n):\n    return sum(int(d) ** {p} for d in str(n))\n",
        [(x,) for x in _ints(rng, 6, 0, 99999)] + [(0,)],
        [(f"** {p}", f"* {p}"), ("str(n)", "str(n)[1:]")],
    )


def longest_run(rng):
    word, op = rng.choice(
        [("strictly increasing", ">"), ("strictly decreasing", "<"), ("non-decreasing", ">="), ("non-increasing", "<=")]
    )
    flipped = {">": ">=", "<": "<=", ">=": ">", "<=": "<"}[op]
    return Problem(
        "longest_run",
        f"longest_run(xs: list[int]) -> int: length of the longest {word} contiguous run (0 for an empty list).",
        "def longest_run(xs):\n    best = cur = 0\n    for i, x in enumerate(xs):\n"
        f"        cur = cur + 1 if i and x {op} xs[i - 1] else 1\n        best = max(best, cur)\n"
        "    return best\n",
        _lists(rng, 6, 0, 9, 0, 10) + [([3, 3, 3],)],
        [(f"x {op} xs[i - 1]", f"x {flipped} xs[i - 1]"), ("best = max(best, cur)", "best = cur")],
    )


def balanced(rng):
    pairs = rng.sample(["()", "[]", "{}", "<>"], rng.randint(2, 3))
    chars = "".join(pairs)
    opens, closes = "".join(p[0] for p in pairs), {p[1]: p[0] for p in pairs}
    inputs = [("".join(rng.choice(chars) for _ in range(rng.randint(0, 8))),) for _ in range(5)]
    inputs += [(pairs[0] + pairs[1],), (pairs[0][0] + pairs[1][0] + pairs[0][1] + pairs[1][1],), (opens,)]
    return Problem(
        "balanced",
        f"balanced(s: str) -> bool: True iff the brackets {' '.join(pairs)} in s are balanced and properly "
        "nested (other characters are ignored).",
        f"def balanced(s):\n    pairs = {closes!r}\n    stack = []\n"
        f"    for c in s:\n        if c in {opens!r}:\n            stack.append(c)\n"
        "        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
        "                return False\n    return not stack\n",
        inputs,
        [("return not stack", "return True"), ("stack.pop() != pairs[c]", "stack.pop() == c")],
    )


def count_pairs(rng):
    target = rng.randint(0, 20)
    return Problem(
        "count_pairs",
        f"count_pairs(xs: list[int]) -> int: the number of index pairs i < j with xs[i] + xs[j] == {target}.",
        "def count_pairs(xs):\n    n = 0\n    for i in range(len(xs)):\n        for j in range(i + 1, len(xs)):\n"
        f"            if xs[i] + xs[j] == {target}:\n                n += 1\n    return n\n",
        _lists(rng, 6, 0, target if target > 0 else 3, 0, 9) + [([target, 0, 0],)],
        [("range(i + 1,", "range(i,"), (f"== {target}", f">= {target}")],
    )


def kth_distinct(rng):
    k = rng.randint(1, 3)
    return Problem(
        "kth_distinct",
        f"kth_distinct(xs: list[int]) -> int | None: among the values that occur "
        f"exactly once in xs, in order, the one at 1-based position {k}; None if there are fewer.",
        f"def kth_distinct(xs):\n    once = [x for x in xs if xs.count(x) == 1]\n"
        f"    return once[{k - 1}] if len(once) >= {k} else None\n",
        _lists(rng, 7, 0, 5, 0, 9),
        [("xs.count(x) == 1", "xs.count(x) >= 1"), (f"once[{k - 1}]", f"once[{k}]")],
    )


FAMILIES = {
    1: [add_k, count_char, is_multiple, largest],
    2: [sum_above, scale_shift, count_vowels, reverse_words],
    3: [running_max, rle, rising_indices, caesar],
    4: [second_largest, merge_sorted, fib_like, digit_power_sum],
    5: [longest_run, balanced, kth_distinct, count_pairs],
}


def run_reference(source: str, entry: str, inputs: list) -> list:
    """Outputs of our own reference source on each argument tuple (trusted code, in-process)."""
    namespace: dict = {}
    exec(compile(source, f"<reference {entry}>", "exec"), namespace)
    return [namespace[entry](*args) for args in inputs]
