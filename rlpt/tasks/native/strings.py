"""String-transform domains ('rev(abc)=' -> 'cba'); tier t uses words of t+2 letters (t+1 words)."""

import string

from rlpt.tasks.native.common import domain, word

_VOWELS = set("aeiou")


def _w(rng, t, extra=0, alphabet=string.ascii_lowercase):
    return word(rng, t + 2 + extra, alphabet)


def _reverse(rng, t):
    w = _w(rng, t)
    return f"rev({w})=", {"answer": w[::-1]}


def _upper(rng, t):
    w = _w(rng, t, extra=t)
    return f"upper({w})=", {"answer": w.upper()}


def _sort_chars(rng, t):
    w = _w(rng, t)
    return f"sortchars({w})=", {"answer": "".join(sorted(w))}


def _caesar(rng, t):
    w, k = _w(rng, t), rng.randint(1, 3 if t <= 2 else 25)
    shifted = "".join(chr((ord(c) - 97 + k) % 26 + 97) for c in w)
    return f"caesar{k}({w})=", {"answer": shifted}


def _devowel(rng, t):
    w = _w(rng, t, extra=2)
    while not (_VOWELS & set(w)) or set(w) <= _VOWELS:
        w = _w(rng, t, extra=2)
    return f"novowels({w})=", {"answer": "".join(c for c in w if c not in _VOWELS)}


def _dedupe(rng, t):
    w = _w(rng, t, extra=2, alphabet="abcdefgh")
    return f"dedupe({w})=", {"answer": "".join(dict.fromkeys(w))}


def _swapcase(rng, t):
    w = _w(rng, t, alphabet=string.ascii_letters)
    return f"swapcase({w})=", {"answer": w.swapcase()}


def _rotate(rng, t):
    w = _w(rng, t, extra=1)
    k = rng.randint(1, len(w) - 1)
    return f"rotl{k}({w})=", {"answer": w[k:] + w[:k]}


def _interleave(rng, t):
    a, b = _w(rng, t), _w(rng, t)
    return f"zip({a},{b})=", {"answer": "".join(x + y for x, y in zip(a, b))}


def _word_reverse(rng, t):
    words = [word(rng, rng.randint(2, 5)) for _ in range(t + 1)]
    return f"reverse words: {' '.join(words)}=", {"answer": " ".join(words[::-1])}


def _rle(rng, t):
    runs = [(rng.choice("abcd"), rng.randint(1, 2 + t)) for _ in range(t + 1)]
    merged: list[list] = []
    for ch, n in runs:
        if merged and merged[-1][0] == ch:
            merged[-1][1] += n
        else:
            merged.append([ch, n])
    text = "".join(ch * n for ch, n in merged)
    return f"rle({text})=", {"answer": "".join(f"{ch}{n}" for ch, n in merged)}


def _acronym(rng, t):
    words = [word(rng, rng.randint(2, 6)) for _ in range(t + 2)]
    return f"acronym({' '.join(words)})=", {"answer": "".join(w[0].upper() for w in words)}


def _double(rng, t):
    w = _w(rng, t)
    return f"dup({w})=", {"answer": "".join(c + c for c in w)}


def _replace(rng, t):
    w = _w(rng, t, extra=2, alphabet="abcdef")
    a = rng.choice(w)
    b = rng.choice([c for c in "uvwxyz"])
    return f"replace {a}->{b} in {w}=", {"answer": w.replace(a, b)}


def _palindrome(rng, t):
    half = _w(rng, t - 1 if t > 1 else t)
    w = half + half[::-1][rng.randint(0, 1) :]
    if rng.random() < 0.5:
        i = rng.randrange(len(w))
        w = w[:i] + rng.choice(string.ascii_lowercase) + w[i + 1 :]
    return f"palindrome({w})?", {"answer": "yes" if w == w[::-1] else "no"}


def domains():
    ex = "exact"
    return [
        domain("str/reverse", _reverse, ex, "reverse a t+2 letter string"),
        domain("str/upper", _upper, ex, "uppercase"),
        domain("str/sort_chars", _sort_chars, ex, "sort the letters"),
        domain("str/caesar", _caesar, ex, "Caesar shift by k"),
        domain("str/remove_vowels", _devowel, ex, "delete vowels"),
        domain("str/dedupe", _dedupe, ex, "keep the first occurrence of each letter"),
        domain("str/swapcase", _swapcase, ex, "swap letter case"),
        domain("str/rotate", _rotate, ex, "rotate left by k"),
        domain("str/interleave", _interleave, ex, "interleave two strings"),
        domain("str/word_reverse", _word_reverse, ex, "reverse word order"),
        domain("str/rle", _rle, ex, "run-length encode"),
        domain("str/acronym", _acronym, ex, "first letters, uppercased"),
        domain("str/double", _double, ex, "double every letter"),
        domain("str/replace", _replace, ex, "replace a letter"),
        domain("str/palindrome", _palindrome, "normalised", "is it a palindrome (yes/no)"),
    ]
