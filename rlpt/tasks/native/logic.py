"""Logic-grid puzzles (zebra style) with a unique solution, and boolean-expression evaluation."""

import functools
import itertools

import numpy as np

from rlpt.tasks.native.common import domain

_ATTRS = {
    "name": ["Ann", "Bob", "Cy", "Dee", "Eve"],
    "color": ["red", "blue", "green", "white", "black"],
    "pet": ["cat", "dog", "fish", "bird", "frog"],
}
# (houses, attributes) per tier; candidate sets stay <= 14,400 so generation is milliseconds.
_SHAPE = {1: (2, 2), 2: (3, 2), 3: (3, 3), 4: (4, 3), 5: (5, 2)}


@functools.cache
def _candidates(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every assignment of k attributes to n houses: value index at each house and house of each value.

    Both (n!**k, k, n) int8: `at[c, a, pos]` is the value of attribute a in house pos of candidate c,
    `where[c, a, v]` the house holding value v. Read-only; shared by every puzzle of that shape.
    """
    perms = np.array(list(itertools.permutations(range(n))), np.int8)  # (n!, n)
    inverse = np.argsort(perms, axis=1).astype(np.int8)  # (n!, n)
    combos = np.stack(np.meshgrid(*[np.arange(len(perms))] * k, indexing="ij"), -1).reshape(-1, k)  # (C, k)
    at, where = perms[combos], inverse[combos]
    at.flags.writeable = where.flags.writeable = False
    return at, where


def _clue_mask(clue, attrs, values, at, where):
    """(C,) bool: which candidates satisfy the clue."""
    kind = clue[0]
    if kind in ("at", "not_at"):
        _, attr, val, pos = clue
        hit = at[:, attrs.index(attr), pos] == values[attr].index(val)
        return hit if kind == "at" else ~hit
    _, a1, v1, a2, v2 = clue
    h1 = where[:, attrs.index(a1), values[a1].index(v1)]
    h2 = where[:, attrs.index(a2), values[a2].index(v2)]
    return h1 == h2 if kind == "same" else h1 + 1 == h2  # "left": v1's house is directly left of v2's


def _who(attr, val):
    return {"name": val, "color": f"the owner of the {val} house", "pet": f"the {val} owner"}[attr]


def _clue_text(clue):
    kind = clue[0]
    if kind in ("at", "not_at"):
        _, attr, val, pos = clue
        verb = "does not live" if kind == "not_at" else "lives"
        return f"{_who(attr, val)} {verb} in house {pos + 1}."
    _, a1, v1, a2, v2 = clue
    if kind == "same":
        return f"{_who(a1, v1)} is {_who(a2, v2)}."
    return f"{_who(a1, v1)} lives directly left of {_who(a2, v2)}."


def _random_clue(rng, attrs, n, sol, t):
    kinds = ["at", "not_at", "same"] + (["left"] * 2 if t >= 2 else [])
    kind = rng.choice(kinds)
    if kind in ("at", "not_at"):
        attr, pos = rng.choice(attrs), rng.randrange(n)
        val = sol[attr][pos] if kind == "at" else rng.choice([v for v in sol[attr] if v != sol[attr][pos]])
        return (kind, attr, val, pos)
    a1, a2 = rng.sample(attrs, 2)
    if kind == "same":
        pos = rng.randrange(n)
        return ("same", a1, sol[a1][pos], a2, sol[a2][pos])
    pos = rng.randrange(n - 1)
    return ("left", a1, sol[a1][pos], a2, sol[a2][pos + 1])


def _grid(rng, t):
    n, k = _SHAPE[t]
    attrs = list(_ATTRS)[:k]
    values = {a: _ATTRS[a][:n] for a in attrs}
    sol = {a: rng.sample(values[a], n) for a in attrs}
    # The clue loop only counts candidates, so a vectorised filter over the cached assignment table
    # consumes the same random draws as a filter over explicit dicts and yields the same puzzle.
    at, where = _candidates(n, k)
    clues = []
    while len(at) > 1:
        clue = _random_clue(rng, attrs, n, sol, t)
        keep = _clue_mask(clue, attrs, values, at, where)
        if not keep.all():  # only informative clues
            clues.append(clue)
            at, where = at[keep], where[keep]
    ask_attr = attrs[-1]
    target = rng.choice(values[ask_attr])
    answer = sol["name"][list(sol[ask_attr]).index(target)]
    kinds = {"name": "person", "color": "house colour", "pet": "pet"}
    lines = [
        f"{n} houses in a row, numbered 1 to {n} from the left. Each has a different "
        + ", ".join(kinds[a] for a in attrs)
        + f" ({'; '.join(', '.join(values[a]) for a in attrs)})."
    ]
    lines += [_capital(_clue_text(c)) for c in clues]
    lines.append(f"Who is {_who(ask_attr, target)}? Answer with the name.")
    return "\n".join(lines), {"answer": answer}


def _boolean(rng, t):
    def expr(depth):
        """(text, value) of a random expression of the given depth."""
        if depth == 0:
            value = rng.random() < 0.5
            return ("T" if value else "F"), value
        op = rng.choice("&|^!")
        left, lv = expr(depth - 1)
        if op == "!":
            return f"!{left}", not lv
        right, rv = expr(rng.randint(0, depth - 1))
        value = {"&": lv and rv, "|": lv or rv, "^": lv != rv}[op]
        return f"({left}{op}{right})", value

    text, value = expr(t + 1)
    return f"{text}=", {"answer": "T" if value else "F"}


def _capital(text):
    return text[0].upper() + text[1:]


def domains():
    return [
        domain("logic/grid", _grid, "normalised", "zebra-style house puzzle with a unique answer"),
        domain("logic/boolean", _boolean, "exact", "evaluate a T/F expression (& | ^ !)"),
    ]
