"""Counting domains ('count a in banana=' -> '3'); the tier sets text length."""

from rlpt.tasks.native.common import domain, word

_WORDS = (
    "cat dog sun map red box tree fish bird lamp road milk cold blue rain star hill door "
    "sand wind ship gold iron salt rice wolf bear frog leaf rock song"
).split()


def _char(rng, t):
    w = word(rng, 3 + 3 * t, "abcdefgh"[: 3 + t])
    c = rng.choice(w)
    return f"count {c} in {w}=", {"answer": str(w.count(c))}


def _words(rng, t):
    words = [rng.choice(_WORDS) for _ in range(rng.randint(2 * t, 5 * t))]
    return f"words in: {' '.join(words)}=", {"answer": str(len(words))}


def _vowels(rng, t):
    w = word(rng, 3 + 3 * t)
    return f"vowels in {w}=", {"answer": str(sum(c in "aeiou" for c in w))}


def _distinct(rng, t):
    w = word(rng, 3 + 3 * t, "abcdefghijkl")
    return f"distinct letters in {w}=", {"answer": str(len(set(w)))}


def _substring(rng, t):
    w = word(rng, 4 + 4 * t, "ab" if t <= 2 else "abc")
    p = word(rng, 2, "ab")
    count = sum(w.startswith(p, i) for i in range(len(w)))  # overlapping occurrences
    return f"count {p} in {w} (overlapping)=", {"answer": str(count)}


def _word_freq(rng, t):
    pool = rng.sample(_WORDS, 2 + t)
    words = [rng.choice(pool) for _ in range(3 * t + 3)]
    w = rng.choice(words)
    return f"how many times is '{w}' in: {' '.join(words)}=", {"answer": str(words.count(w))}


def domains():
    num = "numeric"
    return [
        domain("count/char", _char, num, "occurrences of a letter"),
        domain("count/words", _words, num, "number of words"),
        domain("count/vowels", _vowels, num, "number of vowels"),
        domain("count/distinct", _distinct, num, "number of distinct letters"),
        domain("count/substring", _substring, num, "overlapping occurrences of a 2-letter pattern"),
        domain("count/word_freq", _word_freq, num, "occurrences of a word in a text"),
    ]
